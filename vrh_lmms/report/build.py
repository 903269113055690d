"""Assemble a report: discover runs, compute statistics, write report.json, report.md and plots.

The output folder is refused when it already holds anything, unless `force`; files are written to temporary names
and moved into place so an interrupted run leaves no half-written report.json.
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import numpy as np

from vrh_lmms.base import atomic, console, owned
from vrh_lmms.base.console import LOG_NAME
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.paths import shown_path
from vrh_lmms.base.runfolder.runs import read_run_meta, task_sources
from vrh_lmms.base.runfolder.samples import SampleTable, read_samples
from vrh_lmms.report import plots
from vrh_lmms.report.analysis import LoadedRun, Settings, analyze_group
from vrh_lmms.report.claims import build_claims
from vrh_lmms.report.comparisons import add_null_comparisons, add_summary, apply_corrections, transfer_rows
from vrh_lmms.report.completeness import check_complete, pending_record, unknown_note, unknown_sweeps, warning_line
from vrh_lmms.report.discover import discover
from vrh_lmms.report.doc_filters import doc_filters, group_scores
from vrh_lmms.report.explorer import EXPLORER_NAME, write_explorer
from vrh_lmms.report.heads_files import ScoringLookup, heads_label, overlap_block, read_heads_file
from vrh_lmms.report.html import HTML_NAME, write_report_html
from vrh_lmms.report.jsonable import jsonable
from vrh_lmms.report.maps_panel import is_maps_folder, maps_block, maps_markdown
from vrh_lmms.report.markdown import render
from vrh_lmms.report.pools import control_dead_shares, unavailable_configurations
from vrh_lmms.report.scorers import scorer_block, scorers_markdown, scorers_plot

SCHEMA = "vrh-report/2"


@dataclass(frozen=True)
class ReportSettings:
    alpha: float = 0.05
    n_resamples: int = 10_000
    seed: int = 0
    score_field: str | None = None
    score_quantity: str | None = None  # what the score is (vrh_lmms.base.stats.QUANTITIES); None: from score_field
    heads_files: tuple[str, ...] = ()
    overlap_k: tuple[int, ...] = ()
    plots: bool = True
    force: bool = False
    intersection: bool = False
    allow_incomplete: bool = False  # report sweeps with pending or mixed configurations (flagged) instead of refusing
    arguments: dict = field(default_factory=dict)


def _version() -> str:
    try:
        return metadata.version("vrh-lmms")
    except metadata.PackageNotFoundError:
        return "unknown"


_REPORT_JSON = owned.json_with("groups", schema_prefix="vrh-report/")
# What a report writes into its folder (report.md counts as ours only beside our report.json).
REPORT_LAYOUT: dict[str, owned.Check | None] = {
    "report.json": _REPORT_JSON,
    "report.md": lambda p: p.is_file() and _REPORT_JSON(p.with_name("report.json")),
    "interventions.md": lambda p: p.is_file() and _REPORT_JSON(p.with_name("report.json")),  # report --steer/--patch
    HTML_NAME: lambda p: p.is_file() and _REPORT_JSON(p.with_name("report.json")),
    EXPLORER_NAME: lambda p: p.is_file() and _REPORT_JSON(p.with_name("report.json")),
    "plots": owned.files_matching("*.png"),
    LOG_NAME: owned.log_file,
    ".report.json.*": owned.is_file,
    ".report.md.*": owned.is_file,
    f".{HTML_NAME}.*": owned.is_file,
    f".{EXPLORER_NAME}.*": owned.is_file,
    ".interventions.md.*": owned.is_file,
}


def _check_output(output: Path, force: bool) -> list[Path]:
    """Refuse a folder holding anything a report did not write; our earlier report only with `force`."""
    return owned.check_output(output, REPORT_LAYOUT, force=force, what="an earlier report")


def _same_outcomes(a: SampleTable, b: SampleTable) -> bool:
    """Whether two runs scored the same docs (same ids, images and expressions) exactly alike."""
    return (a.doc_ids == b.doc_ids and a.identity == b.identity and a.statuses == b.statuses
            and np.array_equal(a.scores, b.scores))


def load_runs(dirs: list[str | Path], score_field: str | None) -> tuple[list[LoadedRun], list[str]]:
    """Every (results file, task) of the folders, with duplicates of a model x task x configuration refused.

    One exception: two *baseline* runs of a model x task with identical per-doc outcomes are one run counted once
    (with a warning). A sweep always writes its baseline, so a sweep of the model's own heads and a sweep of heads
    transferred from another model, passed together, carry the same baseline twice."""
    found = discover(dirs)
    runs: list[LoadedRun] = []
    owners: dict[tuple[str, str, str], tuple[Path, SampleTable]] = {}
    warnings = list(found.warnings)
    pairs = [(read_run_meta(item.results), task, path) for item in found.files for task, path in item.samples.items()]
    metas = task_sources([(meta, task) for meta, task, _ in pairs])
    for meta, (_, task, path) in zip(metas, pairs, strict=True):
        key = (meta.model, task, meta.label)
        table = read_samples(path, score_field)
        if key in owners:
            kept, kept_table = owners[key]
            if meta.kind == "baseline" and _same_outcomes(kept_table, table):
                warnings.append(f"{meta.model} / {task}: the baseline in {shown_path(path)} repeats the one in "
                                f"{shown_path(kept)} "
                                "doc for doc; counted once")
                continue
            differ = " (baselines whose outcomes differ)" if meta.kind == "baseline" else ""
            raise VRHError(
                f"two runs of {meta.model} / {task} / {meta.label}{differ}: {kept} and {path}; "
                f"pass only one of them to the report"
            )
        owners[key] = (path, table)
        runs.append(LoadedRun(meta, task, table))
    return runs, warnings


_PATH_ARGUMENTS = ("dirs", "output", "heads_files", "steer", "patch")


def _shown_arguments(arguments: dict) -> dict:
    """The command's arguments as report.json records them: its folders and files by vrh_lmms.base.paths.shown_path."""
    out = dict(arguments)
    for key in _PATH_ARGUMENTS:
        value = out.get(key)
        if isinstance(value, (list, tuple)):
            out[key] = [shown_path(v) for v in value]
        elif isinstance(value, (str, Path)):
            out[key] = shown_path(value)
    return out


def _write_text(path: Path, text: str) -> None:
    atomic.write_text(path, text)


def _make_plots(report: dict, heads, out: Path) -> list[str]:
    written: list[Path | None] = []
    pdir = out / "plots"
    for g in report["groups"]:
        name = plots.slug(g["model"], g["task"])
        modes = sorted({c["mode"] for c in g["configs"] if c["kind"] == "topk" and c["heads_source"] is None})
        for mode in modes:
            suffix = "" if mode == "zero" else f"_{mode}"
            written.append(plots.ksweep_plot(g, mode, pdir / f"ksweep_{name}{suffix}.png"))
        written.append(plots.drop_plot(g, pdir / f"drops_{name}.png"))
        written.append(plots.taxonomy_plot(g, pdir / f"taxonomy_{name}.png"))
    for i, block in enumerate(report["scorers"]):
        written.append(scorers_plot(block, pdir / f"scorers_{plots.slug(block['model'], block['task'])}.png"))
    k_mark = max(report["overlap"]["k"]) if report["overlap"] else max(report["overlap_k"])
    for i, hf in enumerate(heads):
        written.append(plots.heads_heatmap(hf, k_mark, pdir / f"heads_{i}_{plots.slug(hf.model)}.png"))
    if report["overlap"] and len(heads) > 1:
        for k in report["overlap"]["k"]:
            written.append(plots.overlap_plot(report["overlap"]["labels"], report["overlap"]["jaccard"][str(k)], k,
                                              pdir / f"overlap_top{k}.png"))
    return [str(p.relative_to(out)) for p in written if p is not None]


def _primary_cell(group: dict, scoring: ScoringLookup) -> str | None:
    """The scoring cell of the heads file the group's own top-k came from (None: unknown)."""
    for cfg in group["configs"]:
        if cfg["kind"] == "scorer_topk" and cfg["heads_file"]:
            found = scoring(cfg["heads_file"])
            if found:
                return found
    return None


def build_report(dirs: list[str | Path], output: str | Path, settings: ReportSettings = ReportSettings()) -> dict:
    """Write report.json, report.md, report.html and plots/ under `output`; return the report dict (as written to
    JSON)."""
    if not dirs:
        raise VRHError("give at least one sweep or lmms-eval output folder")
    if not 0 < settings.alpha < 1:
        raise VRHError(f"--alpha must be between 0 and 1, got {settings.alpha}")
    if settings.n_resamples < 100:
        raise VRHError(f"--n-resamples must be at least 100, got {settings.n_resamples}")
    out = Path(output)
    replaced = _check_output(out, settings.force)
    unfinished = check_complete(dirs, settings.allow_incomplete)
    unknown = unknown_sweeps(dirs)
    heads = [read_heads_file(p) for p in settings.heads_files]
    map_dirs = [d for d in dirs if is_maps_folder(d)]  # attention-maps / locate folders: their own panel
    dirs = [d for d in dirs if d not in map_dirs]
    if not dirs:
        raise VRHError("give at least one sweep or lmms-eval output folder beside the attention-maps / locate ones")
    runs, warnings = load_runs(dirs, settings.score_field)
    warnings = [unknown_note(shown_path(f)) for f in unknown] + warnings
    stats_settings = Settings(settings.alpha, settings.n_resamples, settings.seed, settings.score_field,
                              settings.intersection, settings.score_quantity)
    scoring = ScoringLookup(heads)

    by_group: dict[tuple[str, str], list[LoadedRun]] = {}
    for run in runs:
        by_group.setdefault((run.meta.model, run.task), []).append(run)
    groups = []
    for (model, task), members in sorted(by_group.items()):
        group, notes = analyze_group(model, task, members, stats_settings)
        for cfg in group["configs"]:
            cfg["heads_label"] = heads_label(cfg, scoring(cfg["heads_file"]) if cfg["kind"] == "topk" else None)
        add_null_comparisons(group)
        add_summary(group)
        group["doc_filters"] = doc_filters(group["summary"], group_scores(members))  # the explorer's filters
        groups.append(group)
        warnings += notes
    multiple = apply_corrections(groups)

    ks = list(settings.overlap_k) or sorted({c["k"] for g in groups for c in g["configs"]
                                               if c["kind"] == "topk" and c["k"]}) or [20]
    report = {
        "schema": SCHEMA,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "version": _version(),
        "arguments": _shown_arguments(settings.arguments),
        "inputs": [shown_path(d) for d in dirs],
        "complete": False if unfinished else None if unknown else True,
        "pending": pending_record(unfinished),
        "settings": {"alpha": settings.alpha, "n_resamples": settings.n_resamples, "seed": settings.seed,
                     "score_field": settings.score_field,
                     "score_quantity": stats_settings.quantity, "intersection": settings.intersection,
                     "accuracy_ci": "Wilson on n / design effect (binary); cluster-robust t (numeric)",
                     "drop_ci": "Tango score interval on counts / design effect (binary); cluster-robust t "
                                "(numeric); BCa bootstrap over images beside both",
                     "test": "cluster sign-flip test over images (primary); exact McNemar beside it"},
        "claims": build_claims(groups, settings.alpha, multiple["families"]),
        "groups": groups,
        "transfer": transfer_rows(groups),
        "scorers": [b for g in groups if (b := scorer_block(g, _primary_cell(g, scoring))) is not None],
        "pools": {"unavailable": unavailable_configurations(dirs),
                  "dead_shares": {f"{g['model']} / {g['task']}": control_dead_shares(g) for g in groups}},
        "overlap": overlap_block(heads, ks),
        "overlap_k": ks,
        "heads_files": [{"path": shown_path(h.path), "model": h.model, "layers": int(h.scores.shape[0]),
                         "heads": int(h.scores.shape[1]), "total_heads": h.n_heads} for h in heads],
        "multiple_testing": multiple,
        "warnings": warnings,
        "files": {"json": "report.json", "markdown": "report.md", "html": HTML_NAME, "explorer": EXPLORER_NAME,
                  "plots": []},
    }
    report = jsonable(report)
    for path in replaced:  # the earlier report's files (stale plots included), nothing else
        owned.remove(path)
    out.mkdir(parents=True, exist_ok=True)
    console.log_to(out / LOG_NAME)
    if settings.plots:
        report["files"]["plots"] = _make_plots(report, heads, out)
    report["maps"] = jsonable(maps_block(map_dirs, out))
    _write_text(out / "report.json", json.dumps(report, indent=1, allow_nan=False))
    first = [warning_line(unfinished), ""] if unfinished else []
    _write_text(out / "report.md", "\n".join(first + [render(report, scorers_markdown(report["scorers"]))])
                + maps_markdown(report["maps"]))
    write_report_html(out)
    write_explorer(out, roots=[Path(d) for d in dirs + map_dirs])
    return report
