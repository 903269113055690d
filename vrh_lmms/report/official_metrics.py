"""Benchmarks' own headline metrics, rebuilt from per-sample ``vrh_record`` dicts (pure functions on records).

Plain accuracy is not every benchmark's score:

- **VAW** (adobe-research/vaw_dataset ``eval/evaluator.py``): per attribute class, balanced accuracy (mA), recall,
  precision, F1 and average precision, averaged over classes ("per-class" metrics), plus micro F1 over all pairs
  ("overall"); reported for all classes and per parent type (color, material, ...). With 74.5% negative labels,
  answering "no" everywhere scores 0.745 plain accuracy but mA 0.5. Our yes/no questions give binary scores, so AP
  is the AP of 0/1 scores, and the evaluator's top-15 metrics (mR@15, F1@15) need a score for all 620
  attributes of an instance and cannot be computed. A parse failure counts as the wrong answer.
- **CV-Bench** (lmms-eval ``cv_bench/utils.py::cv_bench_default_aggregate_results``, the Cambrian-1 formula):
  1/2 x [(acc ADE20K + acc COCO) / 2 + acc Omni3D], accuracies by the image ``source``; the 2D subset reports
  (acc ADE20K + acc COCO) / 2, the 3D subset acc Omni3D.

``headline(records)`` picks the benchmark from the records' fields (so derived tasks with other names work) and
returns None for benchmarks whose headline is plain accuracy (or mean IoU, already a task metric).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vrh_lmms.base.escape import md
from vrh_lmms.report.fmt import short

CV_BENCH_SOURCES = ("ADE20K", "COCO", "Omni3D")


# ------------------------------------------------------------------------------------------------ VAW
def _vaw_pairs(records: Iterable[Mapping[str, Any]]) -> list[tuple[str, int, int, str]]:
    """(attribute, label, prediction, parent type) per record; a parse failure predicts the wrong label."""
    out = []
    for r in records:
        label = 1 if r["polarity"] == "positive" else 0
        pred = r.get("pred")
        guess = 1 if pred == "yes" else (0 if pred == "no" else 1 - label)
        out.append((str(r["attribute"]), label, guess, str(r.get("parent_type") or r.get("question_type") or "")))
    return out


def _class_metrics(labels: np.ndarray, preds: np.ndarray) -> dict[str, float] | None:
    """One attribute's metrics with the official evaluator's conventions; None without both polarities."""
    # deferred: keeps `vrh-lmms report` free of sklearn
    from sklearn.metrics import average_precision_score

    n_pos, n_neg = int(labels.sum()), int((1 - labels).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    tp = int(((labels == 1) & (preds == 1)).sum())
    fp = int(((labels == 0) & (preds == 1)).sum())
    tn = int(((labels == 0) & (preds == 0)).sum())
    recall, tnr = tp / n_pos, tn / n_neg
    precision = tp / (tp + fp) if tp + fp else 1.0  # the evaluator: no positive prediction -> precision 1
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return {"bacc": (recall + tnr) / 2, "recall": recall, "tnr": tnr, "precision": precision, "f1": f1,
            "ap": float(average_precision_score(labels, preds)), "tp": tp, "fp": fp, "tn": tn, "fn": n_pos - tp,
            "n_pos": n_pos, "n_neg": n_neg}


def _group(per_class: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    if not per_class:
        return {"n_classes": 0, "mA": None, "mAP": None, "mean_recall": None, "mean_f1": None, "f1_overall": None}
    mean = {k: float(np.mean([m[k] for m in per_class.values()])) for k in ("bacc", "ap", "recall", "f1")}
    tp, fp, fn = (sum(m[k] for m in per_class.values()) for k in ("tp", "fp", "fn"))
    p_all = tp / (tp + fp) if tp + fp else 1.0
    r_all = tp / (tp + fn) if tp + fn else 0.0
    micro = 2 * p_all * r_all / (p_all + r_all) if p_all + r_all > 0 else 0.0
    return {"n_classes": len(per_class), "mA": mean["bacc"], "mAP": mean["ap"], "mean_recall": mean["recall"],
            "mean_f1": mean["f1"], "f1_overall": micro}


def vaw_metrics(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """VAW's per-class metrics over the (instance, attribute) records, overall and per parent type."""
    pairs = _vaw_pairs(records)
    by_attr: dict[str, list[tuple[int, int]]] = defaultdict(list)
    parent_of: dict[str, str] = {}
    for attr, label, guess, parent in pairs:
        by_attr[attr].append((label, guess))
        parent_of.setdefault(attr, parent)
    per_class, skipped = {}, []
    for attr, rows in sorted(by_attr.items()):
        arr = np.asarray(rows, dtype=int)
        m = _class_metrics(arr[:, 0], arr[:, 1])
        if m is None:
            skipped.append(attr)
        else:
            per_class[attr] = m
    parents = sorted({parent_of[a] for a in per_class})
    labels = np.asarray([p[1] for p in pairs])
    correct = np.asarray([p[1] == p[2] for p in pairs])
    return {
        "benchmark": "vaw",
        **_group(per_class),
        "accuracy": float(correct.mean()) if len(pairs) else None,
        "negative_share": float(1 - labels.mean()) if len(pairs) else None,
        "n_pairs": len(pairs),
        "classes_without_both_polarities": len(skipped),
        "by_parent_type": {p: _group({a: m for a, m in per_class.items() if parent_of[a] == p}) for p in parents},
        "per_class": per_class,
        "not_computable": {"mR@15": "needs scores for all 620 attributes of an instance",
                           "F1@15": "needs scores for all 620 attributes of an instance"},
    }


# ------------------------------------------------------------------------------------------------ CV-Bench
def cv_bench_score(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """CV-Bench's source-weighted score from records with ``source`` and ``correct``."""
    hits: dict[str, list[bool]] = defaultdict(list)
    for r in records:
        hits[str(r["source"])].append(bool(r["correct"]))
    acc = {s: float(np.mean(v)) for s, v in hits.items()}
    unknown = sorted(set(acc) - set(CV_BENCH_SOURCES))
    two_d = (acc["ADE20K"] + acc["COCO"]) / 2 if "ADE20K" in acc and "COCO" in acc else None
    three_d = acc.get("Omni3D")
    if two_d is not None and three_d is not None:
        value, formula = (two_d + three_d) / 2, "1/2 x [(acc ADE20K + acc COCO)/2 + acc Omni3D]"
    elif two_d is not None and "Omni3D" not in acc:
        value, formula = two_d, "(acc ADE20K + acc COCO)/2 (2D only)"
    elif three_d is not None and not ({"ADE20K", "COCO"} & set(acc)):
        value, formula = three_d, "acc Omni3D (3D only)"
    else:
        value, formula = None, "needs ADE20K and COCO (2D) and/or Omni3D (3D) samples"
    return {"benchmark": "cv_bench", "score": value, "formula": formula, "acc_2d": two_d, "acc_3d": three_d,
            "by_source": acc, "n_by_source": {s: len(v) for s, v in hits.items()}, "unknown_sources": unknown,
            "accuracy": float(np.mean([x for v in hits.values() for x in v])) if hits else None}


# ------------------------------------------------------------------------------------------------ dispatch
def benchmark_of(record: Mapping[str, Any]) -> str | None:
    if record.get("kind") != "vqa":
        return None
    if "attribute" in record and "polarity" in record:
        return "vaw"
    if record.get("source") in CV_BENCH_SOURCES:
        return "cv_bench"
    return None


def headline(records: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The official headline of the records' benchmark: {benchmark, metric, value, accuracy, details}, or None."""
    if not records:
        return None
    bench = benchmark_of(records[0])
    if bench == "vaw":
        d = vaw_metrics(records)
        return {"benchmark": "vaw", "metric": "mA", "value": d["mA"], "accuracy": d["accuracy"],
                "by": {p: g["mA"] for p, g in d["by_parent_type"].items()}, "details": d}
    if bench == "cv_bench":
        d = cv_bench_score(records)
        return {"benchmark": "cv_bench", "metric": "CV-Bench score", "value": d["score"], "accuracy": d["accuracy"],
                "by": d["by_source"], "details": d}
    return None


def from_samples(path: str | Path) -> dict[str, Any] | None:
    """``headline`` of the ``vrh_record`` fields of an lmms-eval samples JSONL (None when it has no official
    metric). Only the first record is read unless it belongs to a benchmark with one."""
    records: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as fh:
        for text in fh:
            if not text.strip():
                continue
            rec = json.loads(text).get("vrh_record")
            if not isinstance(rec, dict):
                return None
            if not records and benchmark_of(rec) is None:
                return None
            records.append(rec)
    return headline(records)


# ------------------------------------------------------------------------------------------------ rendering
def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100.0 * x:.1f}"


def markdown_section(groups: Sequence[Mapping[str, Any]]) -> list[str]:
    """Lines of report.md's "Official benchmark metrics" table (empty when no group has one)."""
    rows = []
    for g in groups:
        for c in ([g["baseline"]] if g.get("baseline") else []) + list(g.get("configs", [])):
            h = c.get("official")
            if not h:
                continue
            by = ", ".join(f"{md(k)} {_pct(v)}" for k, v in sorted(h["by"].items()))
            rows.append(f"| {md(short(str(g['model'])))} | {md(g['task'])} | {md(c['label'])} | "
                        f"{md(h['metric'])} | **{_pct(h['value'])}** | {_pct(h['accuracy'])} | {by} |")
    if not rows:
        return []
    return ["## Official benchmark metrics (headline)", "",
            "The benchmark's own score, from the same per-sample records (VAW: mean balanced accuracy over attribute "
            "classes; CV-Bench: accuracy averaged by image source). Plain accuracy beside it.", "",
            "| Model | Task | Config | Metric | Headline | Plain accuracy | By parent type / source |",
            "|---|---|---|---|---|---|---|", *rows, ""]
