"""Located boxes of head sets -> Acc@0.5 against the ground truth, beside the model's own answer, with the report's
cluster-aware intervals (vrh_lmms.base.stats: docs of one image are one cluster).

Head sets per k: the top-k of the heads file, random-k draws (one per seed) and layer-matched draws (one per seed)
from the control pool, as a sweep plans them (vrh_lmms.base.heads.plan; live heads by default; a layer that cannot fill
a layer-matched draw makes it unavailable, reported, never padded). Per k the figures are:
- the model's answer and the top-k locator: accuracy with the design-effect-adjusted Wilson interval
  (`stats.accuracy`, binary), and their paired difference (located - answer) with the Tango interval the report
  prints for drops (`stats.paired_drop`);
- each control kind: the mean over seeds of the per-doc located-correct share, with the cluster-robust t interval
  (`stats.accuracy`, bounded), each seed's own accuracy, and top-k minus that per-doc share (`stats.paired_drop`,
  cluster-robust t). That interval is over docs for the draws made; how much the draws differ from each other
  (a draw holding one reader head locates well, the others do not) is in `per_seed`, shown beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vrh_lmms.base.boxes.geometry import iou
from vrh_lmms.base.heads import kinds
from vrh_lmms.base.heads.geometry import Geometry, HeadRef
from vrh_lmms.base.heads.plan import plan_configurations, planned_headset
from vrh_lmms.base.heads.spec import ControlUnavailable
from vrh_lmms.base.stats import accuracy, paired_drop
from vrh_lmms.runs.maps.collect import DocMaps
from vrh_lmms.runs.maps.grid import cell_grid
from vrh_lmms.runs.maps.locator import LocatorSettings, locate_box
from vrh_lmms.runs.maps.views import head_set_map


def _plan(k: int, seeds: int, pool: str = kinds.DEFAULT_POOL) -> list:
    """The head sets the locator reads at k: a sweep's plan with random-k and layer-matched draws, no baseline."""
    return [c for c in plan_configurations([k], seeds, True, ["zero"], pool=pool) if c.kind != "baseline"]


CONTROLS = tuple(c.kind for c in _plan(1, 1) if kinds.kind(c.kind).control)  # the control kinds it reads, in order
THRESHOLD = 0.5  # Acc@0.5


@dataclass(frozen=True)
class LocatorSet:
    """One head set the locator reads: its id, kind, k and seed as the sweep's plan names them, its heads, or the
    reason it could not be drawn."""

    id: str
    kind: str
    k: int
    seed: int | None
    heads: tuple[HeadRef, ...]
    unavailable: str | None = None


def locator_sets(heads_file, geometry: Geometry, ks: Sequence[int], seeds: int, dead: tuple[HeadRef, ...],
                 pool: str = kinds.DEFAULT_POOL) -> list[LocatorSet]:
    """top-k, then `seeds` random-k and layer-matched draws per k, in the order of `ks`."""
    out = []
    for k in ks:
        for cfg in _plan(k, seeds, pool):
            try:
                hs = planned_headset(cfg, geometry, heads_file, dead)
            except ControlUnavailable as exc:
                out.append(LocatorSet(cfg.id, cfg.kind, k, cfg.seed, (), unavailable=str(exc)))
                continue
            out.append(LocatorSet(cfg.id, cfg.kind, k, cfg.seed, hs.heads))
    return out


def locate_doc(doc: DocMaps, sets: Sequence[LocatorSet], settings: LocatorSettings,
               ) -> dict[str, tuple[list[float], float]]:
    """set id -> (located box in pixels, its IoU with the ground truth) for one doc, every available set. Called as
    each doc is captured, so a long run keeps boxes, not every head's map of every doc."""
    grid = cell_grid(doc.cells, doc.views, doc.image_size)
    out = {}
    for s in sets:
        if s.unavailable:
            continue
        box = locate_box(grid.to_grid(head_set_map(doc.per_head, s.heads)), grid, settings)
        out[s.id] = ([round(v, 3) for v in box], iou(box, doc.gt_box))
    return out


def _clusters(docs: Sequence[DocMaps]) -> np.ndarray | None:
    ids = [d.image_id for d in docs]
    return None if any(not i for i in ids) else np.asarray(ids)


def _acc(values: np.ndarray, clusters, quantity: str) -> dict[str, Any]:
    r = accuracy(values, clusters, quantity=quantity)
    return {"mean": r.mean, "ci_low": r.ci_low, "ci_high": r.ci_high, "method": r.method, "n": r.n,
            "n_clusters": r.n_clusters}


def _diff(a: np.ndarray, b: np.ndarray, clusters, seed: int) -> dict[str, Any]:
    """a - b on paired docs with the report's drop interval (paired_drop measures baseline - other)."""
    d = paired_drop(a, b, clusters, n_resamples=2000, seed=seed, bootstrap=False)
    return {"diff": d.drop, "ci_low": d.ci_low, "ci_high": d.ci_high, "method": d.method}


def evaluate_sets(docs: Sequence[DocMaps], sets: Sequence[LocatorSet],
                  located: Sequence[dict[str, tuple[list[float], float]]], seed: int = 0) -> dict[str, Any]:
    """Per-set located boxes / IoUs and per-k summary rows (module docstring); located[i]: `locate_doc` of docs[i]."""
    clusters = _clusters(docs)
    answer = np.array([1.0 if d.correct else 0.0 for d in docs])
    per_set: dict[str, dict[str, Any]] = {}
    correct: dict[str, np.ndarray] = {}
    for s in sets:
        if s.unavailable:
            per_set[s.id] = {"kind": s.kind, "k": s.k, "seed": s.seed, "unavailable": s.unavailable}
            continue
        boxes = [entry[s.id][0] for entry in located]
        ious = np.array([entry[s.id][1] for entry in located])
        correct[s.id] = (ious >= THRESHOLD).astype(float)
        per_set[s.id] = {"kind": s.kind, "k": s.k, "seed": s.seed, "heads": [str(h) for h in s.heads],
                         "acc50": float(correct[s.id].mean()), "mean_iou": float(ious.mean()),
                         "boxes": boxes, "iou": ious.round(6).tolist()}
    rows = []
    for k in sorted({s.k for s in sets}):
        top = correct[f"top{k}"]
        row: dict[str, Any] = {"k": k, "answer": _acc(answer, clusters, "binary"),
                               "topk": _acc(top, clusters, "binary"),
                               "topk_minus_answer": _diff(top, answer, clusters, seed)}
        for kind in CONTROLS:
            ids = [s.id for s in sets if s.k == k and s.kind == kind and s.id in correct]
            skipped = [s.id for s in sets if s.k == k and s.kind == kind and s.unavailable]
            if not ids:
                row[kind] = {"draws": 0, "unavailable": skipped}
                continue
            share = np.mean([correct[i] for i in ids], axis=0)
            row[kind] = {"draws": len(ids), "unavailable": skipped, **_acc(share, clusters, "bounded"),
                         "per_seed": [float(correct[i].mean()) for i in ids],
                         "topk_minus": _diff(top, share, clusters, seed)}
        rows.append(row)
    return {"n_docs": len(docs), "clustered_by": "image_id" if clusters is not None else "doc_id",
            "n_images": len(set(clusters.tolist())) if clusters is not None else len(docs),
            "rows": rows, "sets": per_set}
