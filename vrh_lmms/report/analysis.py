"""Per model x task statistics: accuracy + CI of every configuration, and against the baseline on paired docs the
drop with a clustered bootstrap CI, the exact McNemar test and where the lost samples went (failure taxonomy)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from vrh_lmms.errors import VRHError
from vrh_lmms.report.pairing import pair
from vrh_lmms.report.runs import RunMeta
from vrh_lmms.report.samples import STATUSES, SampleTable
from vrh_lmms.stats import accuracy, exact_mcnemar, is_binary, paired_bootstrap_drop

_KIND_ORDER = {"baseline": 0, "topk": 1, "random": 2, "layer_matched": 3, "image_matched": 4, "explicit": 5}


@dataclass
class LoadedRun:
    meta: RunMeta
    task: str
    table: SampleTable


@dataclass(frozen=True)
class Settings:
    alpha: float = 0.05
    n_resamples: int = 10_000
    seed: int = 0
    score_field: str | None = None


def sort_key(run: LoadedRun) -> tuple:
    m = run.meta
    return (_KIND_ORDER.get(m.kind, 9), m.heads_source or "", m.mode or "", m.k or 0, m.seed or 0, m.config_id)


def taxonomy(statuses: list[str] | None, kind: str) -> dict | None:
    """Counts and fractions of each status of the task's kind (grounding: mislocated; vqa: wrong)."""
    if statuses is None or kind not in STATUSES:
        return None
    counts = Counter(statuses)
    n = len(statuses)
    names = STATUSES[kind]
    return {"counts": {s: int(counts.get(s, 0)) for s in names}, "fractions": {s: counts.get(s, 0) / n for s in names}}


def _lost_to(paired, kind: str) -> dict | None:
    """Status after ablation of samples the baseline got right and the ablated model got wrong."""
    if paired.baseline_status is None or paired.other_status is None or kind not in STATUSES:
        return None
    lost = Counter(
        after for before, after in zip(paired.baseline_status, paired.other_status, strict=True)
        if before == "correct" and after != "correct"
    )
    return {s: int(lost.get(s, 0)) for s in STATUSES[kind] if s != "correct"}


def _run_block(run: LoadedRun, settings: Settings) -> dict:
    m = run.meta
    return {
        "label": m.label,
        "config_id": m.config_id,
        "kind": m.kind,
        "k": m.k,
        "seed": m.seed,
        "mode": m.mode,
        "heads_source": m.heads_source,
        "heads_file": m.heads_file,
        "results": str(m.results_path),
        "samples": str(run.table.path),
        "accuracy": accuracy(run.table.scores, alpha=settings.alpha).to_dict(),
        "taxonomy": taxonomy(run.table.statuses, run.table.kind),
        "paired": None,
        "drop": None,
        "mcnemar": None,
        "lost_to": None,
    }


def _compare(block: dict, base: SampleTable, run: LoadedRun, settings: Settings, warnings: list[str]) -> None:
    paired = pair(base, run.table)
    block["paired"] = {
        "n_baseline": paired.n_baseline,
        "n_config": paired.n_other,
        "n_paired": paired.n,
        "clustered_by": "image_id" if paired.clusters is not None else "doc_id",
        "n_clusters": None,
        "baseline_mean": None,
        "config_mean": None,
    }
    if paired.n == 0:
        warnings.append(f"{run.meta.model} / {run.task} / {run.meta.label}: no doc_id in common with the baseline")
        return
    if paired.n < max(paired.n_baseline, paired.n_other):
        warnings.append(
            f"{run.meta.model} / {run.task} / {run.meta.label}: paired on the {paired.n} doc_ids in common "
            f"(baseline has {paired.n_baseline}, configuration has {paired.n_other})"
        )
    drop = paired_bootstrap_drop(
        paired.baseline, paired.other, paired.clusters,
        n_resamples=settings.n_resamples, alpha=settings.alpha, seed=settings.seed,
    )
    block["paired"].update(
        n_clusters=drop.n_clusters,
        baseline_mean=float(paired.baseline.mean()),
        config_mean=float(paired.other.mean()),
    )
    block["drop"] = drop.to_dict()
    if is_binary(paired.baseline) and is_binary(paired.other):
        block["mcnemar"] = exact_mcnemar(paired.baseline, paired.other).to_dict() | {"p_holm": None, "p_bh": None}
    block["lost_to"] = _lost_to(paired, run.table.kind)


def analyze_group(model: str, task: str, runs: list[LoadedRun], settings: Settings) -> tuple[dict, list[str]]:
    """Statistics of every configuration of one model x task; returns (group block, warnings)."""
    warnings: list[str] = []
    kinds = {r.table.kind for r in runs}
    if len(kinds) > 1:
        files = ", ".join(str(r.table.path) for r in runs)
        raise VRHError(f"{model} / {task}: runs disagree on the record kind {sorted(kinds)} ({files})")
    kind = kinds.pop()
    runs = sorted(runs, key=sort_key)
    base = next((r for r in runs if r.meta.kind == "baseline"), None)
    if base is None:
        warnings.append(
            f"{model} / {task}: no baseline run found; accuracies are reported but drops, McNemar tests and "
            f"null comparisons need one (add the baseline's folder to the report)"
        )
    clustered = True
    configs = []
    for run in runs:
        if run is base:
            continue
        block = _run_block(run, settings)
        if base is not None:
            _compare(block, base.table, run, settings, warnings)
            clustered &= block["paired"]["clustered_by"] == "image_id"
        configs.append(block)
    if base is not None and configs and not clustered:
        warnings.append(f"{model} / {task}: no image_id in the samples; bootstrap resamples docs, not images")
    metric = settings.score_field or {"grounding": "acc50", "pointing": "acc", "vqa": "acc"}.get(kind, "score")
    group = {
        "model": model,
        "task": task,
        "kind": kind,
        "metric": metric,
        "baseline": None if base is None else _run_block(base, settings),
        "configs": configs,
        "null_comparisons": [],
        "summary": [],
    }
    return group, warnings
