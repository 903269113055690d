"""Per model x task statistics on one doc set: accuracy + cluster-adjusted CI of every configuration, and against the
baseline the drop with its cluster-aware interval, the cluster sign-flip test (primary), the exact McNemar test
(beside it, valid only for independent samples) and where the lost samples went (failure taxonomy)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import kinds
from vrh_lmms.base.paths import shown_model, shown_path
from vrh_lmms.base.runfolder.runs import RunMeta
from vrh_lmms.base.runfolder.samples import STATUSES, SampleTable
from vrh_lmms.base.stats import accuracy, exact_mcnemar, is_binary, paired_drop, sign_flip_test
from vrh_lmms.base.stats.subsample import subsample_drop
from vrh_lmms.report import official_metrics
from vrh_lmms.report.pairing import align, pair

# control kinds in report order and how the report names them (vrh_lmms.base.heads.kinds)
CONTROL_NAMES = {k.name: k.label for k in kinds.KINDS if k.control}
CONTROL_KINDS = kinds.CONTROLS


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
    intersection: bool = False
    score_quantity: str | None = None  # None: "binary" for vrh_record.correct, "unbounded" for a --score-field

    @property
    def quantity(self) -> str:
        """What a run's per-sample score is (vrh_lmms.base.stats.accuracy): the caller's word, not the values seen."""
        return self.score_quantity or ("binary" if self.score_field is None else "unbounded")


def sort_key(run: LoadedRun) -> tuple:
    m = run.meta
    return (kinds.order(m.kind), m.heads_source or "", m.mode or "", m.k or 0, m.seed or 0, m.config_id)


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


def _shown_heads_file(block: dict | None) -> dict | None:
    """A run's record of its heads file with the file and the model it names shown as reports show paths."""
    if not block:
        return block
    out = dict(block)
    if isinstance(out.get("path"), str) and out["path"]:
        out["path"] = shown_path(out["path"])
    if isinstance(out.get("model"), str):
        out["model"] = shown_model(out["model"])
    return out


def _run_block(run: LoadedRun, table: SampleTable, settings: Settings) -> dict:
    m = run.meta
    return {
        "label": m.label,
        "config_id": m.config_id,
        "kind": m.kind,
        "k": m.k,
        "seed": m.seed,
        "mode": m.mode,
        "heads_source": m.heads_source,
        "heads_file": _shown_heads_file(m.heads_file),
        "heads": None if m.heads is None else list(m.heads),
        "heads_label": None,
        "cell": m.cell,
        "pool": m.pool,
        "dead_heads": None if m.dead_in_set is None else list(m.dead_in_set),
        "results": shown_path(m.results_path),
        "samples": shown_path(table.path),
        "accuracy": accuracy(table.scores, table.image_ids, alpha=settings.alpha,
                             quantity=settings.quantity).to_dict(),
        "official": official_metrics.from_samples(table.path),  # the benchmark's own headline, or None
        "taxonomy": taxonomy(table.statuses, table.kind),
        "paired": None,
        "drop": None,
        "test": None,
        "mcnemar": None,
        "lost_to": None,
    }


def _compare(block: dict, base: SampleTable, table: SampleTable, settings: Settings,
             all_clusters: list[str] | None = None) -> None:
    """The configuration against its baseline on their shared docs; `all_clusters` (the image of every doc of the
    task) where the configuration ran on a doc subset (`base` is then the baseline restricted to it)."""
    paired = pair(base, table)
    if all_clusters is not None:
        drop = _subset_drop(paired, all_clusters, settings.alpha)
    else:
        # The BCa bootstrap beside the printed interval is a cross-check of the claims; the controls (often 19+
        # draws per k) skip it, which keeps reports of large sweeps fast. Numeric scores need no bootstrap.
        drop = paired_drop(paired.baseline, paired.other, paired.clusters, alpha=settings.alpha,
                           n_resamples=settings.n_resamples, seed=settings.seed,
                           bootstrap=block["kind"] not in CONTROL_KINDS)
    test = sign_flip_test(paired.baseline, paired.other, paired.clusters, n_resamples=settings.n_resamples,
                          seed=settings.seed)
    block["paired"] = {
        "n_paired": paired.n,
        "clustered_by": "image_id" if paired.clusters is not None else "doc_id",
        "n_clusters": drop.n_clusters,
        "baseline_mean": float(paired.baseline.mean()),
        "config_mean": float(paired.other.mean()),
    }
    block["drop"] = drop.to_dict()
    block["test"] = test.to_dict() | {"name": "cluster sign-flip", "family": None, "p_holm": None, "p_bh": None}
    if is_binary(paired.baseline) and is_binary(paired.other):
        block["mcnemar"] = exact_mcnemar(paired.baseline, paired.other).to_dict()
    block["lost_to"] = _lost_to(paired, table.kind)


@dataclass(frozen=True)
class _SubsetDrop:
    """A drop on a doc subset as the report's blocks hold it: `ci_low` / `ci_high` are subsample_drop's `ci` (the
    population's drop, the target of every other interval); `subset` keeps all of subsample_drop (`ci_docs`)."""

    drop: float
    ci_low: float
    ci_high: float
    n_clusters: int
    subset: dict

    def to_dict(self) -> dict:
        return {"drop": self.drop, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "method": "cluster-robust t on the subset's images (subsample_drop ci: the population's drop)",
                "n_pairs": self.subset["n_docs"], "n_clusters": self.n_clusters, "subset": self.subset}


def _subset_drop(paired, all_clusters: list[str], alpha: float) -> _SubsetDrop:
    clusters = paired.clusters if paired.clusters is not None else paired.doc_ids
    sub = subsample_drop(paired.baseline, paired.other, clusters, all_clusters, alpha=alpha)
    return _SubsetDrop(sub.drop, sub.ci_low, sub.ci_high, sub.n_images, sub.to_dict())


def subset_doc_ids(run: LoadedRun) -> list[str] | None:
    """The doc ids of the subset a control ran on in this run's task (--control-docs), None: every doc."""
    entry = ((run.meta.doc_subset or {}).get("tasks") or {}).get(run.task)
    return None if entry is None else [str(i) for i in entry["doc_ids"]]


def _on_subset(where: str, runs: list[LoadedRun], base: LoadedRun | None, base_table: SampleTable | None
               ) -> tuple[SampleTable | None, list[SampleTable]]:
    """The baseline restricted to the controls' shared doc subset, and the controls' tables on it (same order),
    checked like every other pair of runs; one subset for every control, so the draws stay paired."""
    subsets = {tuple(subset_doc_ids(r)) for r in runs}
    if len(subsets) > 1:
        raise VRHError(f"{where}: the control runs ran on {len(subsets)} different doc subsets "
                       f"({', '.join(r.meta.label for r in runs[:6])}); report sweeps of one --control-docs and "
                       f"--seed together")
    wanted = list(subsets.pop())
    for r in runs:
        if sorted(r.table.doc_ids) != sorted(wanted):
            raise VRHError(f"{where}: {r.meta.label} ({r.table.path}) holds {len(r.table.doc_ids)} docs, not the "
                           f"{len(wanted)} of the doc subset its results.json names")
    labels, tables = [r.meta.label for r in runs], [r.table for r in runs]
    if base_table is not None:
        index = base_table.index()
        missing = [d for d in wanted if d not in index]
        if missing:
            raise VRHError(f"{where}: the baseline has no doc {missing[0]} of the controls' doc subset "
                           f"({len(missing)} missing)")
        order = sorted(wanted, key=index.__getitem__)
        labels, tables = [base.meta.label, *labels], [base_table.subset([index[d] for d in order]), *tables]
    _, aligned = align(where, labels, tables, 0, False)
    return (aligned[0], aligned[1:]) if base_table is not None else (None, aligned)


def _subset_record(runs: list[LoadedRun], base_table: SampleTable | None) -> dict | None:
    """What the group's doc set says about the controls' subset: asked and evaluated docs, images, seed."""
    if not runs:
        return None
    block = runs[0].meta.doc_subset
    entry = block["tasks"][runs[0].task]
    n_docs = len(entry["doc_ids"])
    all_docs = len(base_table.doc_ids) if base_table is not None else entry.get("all_docs")
    return {"asked": block.get("n"), "seed": block.get("seed"), "n_docs": n_docs, "all_docs": all_docs,
            "n_images": entry.get("n_images"), "all_images": entry.get("all_images"), "n_configs": len(runs)}


def _left_out(runs: list[LoadedRun], task: str) -> int | None:
    """How many leading docs (discovery's) the runs left out of this task; None when they kept them."""
    firsts = {(r.meta.excluded_docs or {}).get(task) for r in runs}
    firsts.discard(None)
    return max(firsts) if firsts else None


def check_one_convention(where: str, runs: list[LoadedRun]) -> None:
    """The runs of a group read their answers' boxes under one convention: a drop between two conventions measures
    the reading, not the heads (a sweep resumed under another VRH_BOX_CONVENTION would otherwise report one)."""
    used = {c: r for r in runs for c in r.table.conventions}
    if len(used) > 1:
        names = ", ".join(f"{c} ({r.meta.label}, {r.table.path})" for c, r in sorted(used.items()))
        raise VRHError(f"{where}: the runs read boxes under {len(used)} box conventions: {names}; report runs of "
                       f"one convention together (rerun the others under it)")


def analyze_group(model: str, task: str, runs: list[LoadedRun], settings: Settings) -> tuple[dict, list[str]]:
    """Statistics of every configuration of one model x task; returns (group block, warnings)."""
    warnings: list[str] = []
    where = f"{model} / {task}"
    kinds = {r.table.kind for r in runs}
    if len(kinds) > 1:
        files = ", ".join(str(r.table.path) for r in runs)
        raise VRHError(f"{where}: runs disagree on the record kind {sorted(kinds)} ({files})")
    kind = kinds.pop()
    check_one_convention(where, runs)
    runs = sorted(runs, key=sort_key)
    subset_runs = [r for r in runs if subset_doc_ids(r) is not None]  # controls of --control-docs
    runs = [r for r in runs if subset_doc_ids(r) is None]
    if not runs:
        raise VRHError(f"{where}: only controls run on a doc subset; add the sweep's baseline and top-k runs")
    base = next((r for r in runs if r.meta.kind == "baseline"), None)
    ref = runs.index(base) if base is not None else 0
    doc_set, tables = align(where, [r.meta.label for r in runs], [r.table for r in runs], ref, settings.intersection)
    base_on_subset, subset_tables = (_on_subset(where, subset_runs, base, tables[ref] if base else None)
                                     if subset_runs else (None, []))
    if doc_set.restricted:
        counts = ", ".join(f"{label} {n}" for label, n in doc_set.per_run.items())
        warnings.append(f"{where}: every number uses the {len(doc_set.doc_ids)} docs all runs share "
                        f"(--intersection); the runs' samples files hold {counts}")
    if base is None:
        warnings.append(
            f"{where}: no baseline run found; accuracies are reported but drops, tests and null comparisons need "
            f"one (add the baseline's folder to the report)"
        )
    configs = []
    for run, table in zip(runs, tables, strict=True):
        if run is base:
            continue
        block = _run_block(run, table, settings)
        if base is not None:
            _compare(block, tables[ref], table, settings)
        configs.append(block)
    all_images = None if base is None else (tables[ref].image_ids or tables[ref].doc_ids)
    for run, table in zip(subset_runs, subset_tables, strict=True):
        block = _run_block(run, table, settings)
        if base_on_subset is not None:
            _compare(block, base_on_subset, table, settings, all_clusters=all_images)
        configs.append(block)
    order = {r.meta.label: sort_key(r) for r in runs + subset_runs}
    configs.sort(key=lambda b: order[b["label"]])
    if tables[ref].image_ids is None:
        warnings.append(f"{where}: no image_id in the samples; intervals and tests treat every doc as independent")
    metric = settings.score_field or {"grounding": "acc50", "pointing": "acc", "vqa": "acc"}.get(kind, "score")
    group = {
        "model": model,
        "task": task,
        "kind": kind,
        "metric": metric,
        "doc_set": doc_set.to_dict() | {"discovery_docs_left_out": _left_out(runs, task),
                                        "control_docs": _subset_record(subset_runs, tables[ref] if base else None)},
        "baseline": None if base is None else _run_block(base, tables[ref], settings),
        "configs": configs,
        "null_comparisons": [],
        "summary": [],
        # the model's heads that write nothing, as its runs recorded them (None: not recorded or not readable)
        "dead_heads": next((list(r.meta.model_dead) for r in runs if r.meta.model_dead is not None), None),
    }
    return group, warnings
