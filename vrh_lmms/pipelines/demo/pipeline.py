"""`vrh-lmms demo`: the whole method on the shipped tiny VLM, through the same code paths as real runs.

1. held-out synthetic scenes (never seen in training) for discovery and, disjoint from them, for evaluation;
2. discovery (`vrh-lmms discover`, default scoring out,sum,mean) on the discovery scenes;
3. a sweep (baseline, top-k, random-k and layer-matched random-k over several seeds) on the evaluation scenes; the
   controls draw from live heads (the model's pruned heads write nothing), and uniform random-k draws over all heads,
   the paper's control, run beside them;
4. the report, plus the acceptance figures computed from the sweep's own sample files.
One model load serves every step.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import sem

from vrh_lmms.base import console, owned, runfile
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.escape import md, md_code
from vrh_lmms.base.heads import kinds
from vrh_lmms.base.paths import shown_model
from vrh_lmms.base.stats import paired_drop
from vrh_lmms.harness.preload import config_geometry, load_config
from vrh_lmms.pipelines.demo.checkpoint import DemoModel, demo_model, shipped_model
from vrh_lmms.pipelines.demo.console_summary import show
from vrh_lmms.pipelines.demo.kcurve import plot_k_curve
from vrh_lmms.pipelines.demo.recall import (
    MAPS_PLOT,
    RECALL_DIR,
    plot_recall,
    recall_markdown,
    recall_summary,
    run_recall,
)
from vrh_lmms.pipelines.demo.stages import (  # noqa: F401  (EVAL_START: the demo's scene ids, for its callers)
    EVAL_START,
    MODEL_LINE,
    TARGETS_NOTE,
    TASK,
    DemoSettings,
    batch_size,
    demo_controls,
    demo_plan,
    discover_heads,
    model_id,
    sweep_heads,
)
from vrh_lmms.pipelines.demo.stages import scoped_env as _env
from vrh_lmms.pipelines.demo.stages import synth_config as _synth_config
from vrh_lmms.pipelines.demo.transfer import (
    TRANSFER_DIR,
    agreement_markdown,
    checked_second_model,
    heads_agreement,
    run_transfer,
    transfer_figures,
    transfer_markdown,
)
from vrh_lmms.report.build import REPORT_LAYOUT, ReportSettings, build_report
from vrh_lmms.report.fmt import pct, pct_ci
from vrh_lmms.report.html import write_report_html
from vrh_lmms.report.interventions import append_to_report, write_patching_report, write_steering_report
from vrh_lmms.runs.sweep.checks import SWEEP_LAYOUT

INTERVENTION_START = 200_000  # scenes of the optional steering / patching step, every object named


def demo_model_path() -> Path:
    return shipped_model()


@dataclass
class Acceptance:
    """The demo's claims, recomputed from the sweep's sample files every run."""

    baseline_acc: float
    n_eval: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    dead_heads: list[str] | None = None  # the model's heads that write nothing (sweep.json)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _load_records(path: Path) -> dict[int, dict]:
    out = {}
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            out[int(row["doc_id"])] = row["vrh_record"]
    return out


def acceptance_figures(sweep_dir: Path, ks: Sequence[int], n_resamples: int = 5000) -> Acceptance:
    """Baseline accuracy, and per k: top-k drop with the report's cluster-aware interval
    (`vrh_lmms.base.stats.paired_drop`,
    the interval report.md prints), mean random / layer-matched drops and their number of draws, parse-failure
    rates — straight from the sample files."""

    configs = sweep_dir / "configs"
    base = _load_records(configs / "baseline" / f"samples_{TASK}.jsonl")
    ids = sorted(base)
    b = np.array([float(base[i]["correct"]) for i in ids])
    clusters = np.array([str(base[i]["image_id"]) for i in ids])
    manifest_path = sweep_dir / "sweep.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {"configurations": []}
    unavailable = {c["id"]: c.get("reason", "") for c in manifest["configurations"] if c["status"] == "unavailable"}
    acc = Acceptance(baseline_acc=float(b.mean()), n_eval=len(ids), dead_heads=manifest.get("dead_heads"))

    def correct(cfg: str) -> tuple[np.ndarray, float]:
        rec = _load_records(configs / cfg / f"samples_{TASK}.jsonl")
        c = np.array([float(rec[i]["correct"]) for i in ids])
        pf = float(np.mean([rec[i]["status"] == "parse_failure" for i in ids]))
        return c, pf

    controls = demo_controls()
    for k in ks:
        top, top_pf = correct(f"top{k}")
        drop = paired_drop(b, top, clusters, n_resamples=n_resamples, seed=0)
        row: dict[str, Any] = {"k": k, "topk_acc": float(top.mean()), "topk_drop": drop.drop,
                               "topk_drop_ci": [drop.ci_low, drop.ci_high], "topk_drop_ci_method": drop.method,
                               "topk_parse_failure": top_pf}
        for kind in controls:
            prefix = kinds.kind(kind).id_prefix
            runs = sorted((p.name for p in configs.glob(f"{prefix}{k}_s*") if (p / "results.json").is_file()),
                          key=_draw_seed)  # seed order (s2 before s10), as the sweep ran them
            drops, pfs, dead = [], [], []
            for name in runs:
                c, pf = correct(name)
                drops.append(float(b.mean() - c.mean()))
                pfs.append(pf)
                ablation = json.loads((configs / name / "results.json").read_text()).get("vrh", {}).get("ablation", {})
                dead.append(len(ablation.get("dead_heads") or []))
            row[f"{kind}_drops"] = drops
            row[f"{kind}_dead_per_draw"] = dead
            row[f"{kind}_unavailable"] = next((r for cid, r in unavailable.items()
                                               if re.fullmatch(rf"{prefix}{k}_s\d+", cid)), None)
            row[f"{kind}_mean_drop"] = float(np.mean(drops)) if drops else None
            # how far the mean of these few draws may sit from the mean over all k-sets (None below two draws)
            row[f"{kind}_mean_drop_se"] = float(sem(drops)) if len(drops) > 1 else None
            row[f"{kind}_max_parse_failure"] = max(pfs) if pfs else None
        acc.rows.append(row)
    return acc


def _draw_seed(config_name: str) -> int:
    """`random5_s12` -> 12 (the sweep's configuration names, vrh_lmms.base.heads.plan)."""
    return int(re.search(r"_s(\d+)", config_name).group(1))


def plot_acceptance_curve(acc: Acceptance, layers: int, heads: int, path: Path,
                          total_heads: int | None = None) -> Path:
    """The demo's k-curve: top-k, random-k and layer-matched random-k drops against k, from the sweep's samples."""
    rows = [{"k": r["k"], "top_drop": 100 * r["topk_drop"],
             **{f"{kind}_drops": [100 * d for d in r.get(f"{kind}_drops", [])] for kind in demo_controls()}}
            for r in acc.rows if r["random_drops"]]
    plot_k_curve({"rows": rows, "layers": layers, "heads": heads, "total_heads": total_heads or layers * heads}, path,
                 f"demo: Acc@0.5 drops on {acc.n_eval} held-out scenes (baseline {acc.baseline_acc:.1%})",
                 pool=kinds.DEFAULT_POOL)
    return path


def _control(row: dict, kind: str) -> str:
    """`11.4 ± 3.3 (10)`: a control's mean drop over its R draws ± its standard error, in points;
    `unavailable` where no draw could be made from live heads."""
    if not row.get(f"{kind}_drops") and row.get(f"{kind}_unavailable"):
        return "unavailable"
    se = row.get(f"{kind}_mean_drop_se")
    spread = "" if se is None else f" ± {pct(se)}"
    return f"{pct(row.get(f'{kind}_mean_drop'))}{spread} ({len(row.get(f'{kind}_drops', []))})"


def _dead_share(row: dict, kind: str) -> str:
    """`7 of 10 (1.4)`: draws holding a head that writes nothing, and the mean number of such heads per draw."""
    dead = row.get(f"{kind}_dead_per_draw") or []
    if not dead:
        return "-"
    return f"{sum(1 for d in dead if d)} of {len(dead)} ({np.mean(dead):.1f})"


def met_at(checks: dict[int, dict[str, bool]]) -> list[int]:
    """The ks (<= 10% of all heads) at which every acceptance check holds."""
    return [k for k, c in checks.items() if all(c.values())]


# The pictures demo_summary.md shows, relative to the demo folder: the only files its part of report.html embeds.
DEMO_IMAGES = ("kcurve.png", "recall.png", f"{RECALL_DIR}/{MAPS_PLOT}")


def write_demo_html(out: Path, model_name: str, markdown: str) -> Path:
    """report/report.html with the demo's verdict (demo_summary.md, its pictures relative to `out`) in front."""
    title = f"vrh-lmms demo: {model_name}"
    return write_report_html(out / "report", before=[(f"# {md(title)}\n\n{markdown}", out, DEMO_IMAGES)],
                             title=title)


def _joined(items: Sequence[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def finding(acc: Acceptance) -> str:
    """The demo's first line, one sentence: what was measured, each top-k drop with its interval, against its live
    controls at the same k (the design targets of the demo model come later, as a note on the model)."""
    rows = acc.rows
    if not rows:
        return f"**No top-k ablation was run** (baseline Acc@0.5 {acc.baseline_acc:.1%} on {acc.n_eval} scenes)."
    ks = [r["k"] for r in rows]
    drops = [pct_ci(r["topk_drop"], *r["topk_drop_ci"]).replace(" [", " points [" if i == 0 else " [", 1)
             + f" at k = {r['k']}" for i, r in enumerate(rows)]
    head = (f"**Ablating the discovered top-k heads cuts Acc@0.5 (baseline {acc.baseline_acc:.1%} on {acc.n_eval} "
            f"held-out scenes) by {_joined(drops)}")
    said, unavailable, draws = [], [], set()
    for kind in demo_controls(targets_only=True):
        legend = kinds.kind(kind).legend
        shown = [(r["k"], _control(r, kind).rsplit(" (", 1)[0]) for r in rows if r.get(f"{kind}_drops")]
        draws |= {len(r[f"{kind}_drops"]) for r in rows if r.get(f"{kind}_drops")}
        missing = [r["k"] for r in rows if not r.get(f"{kind}_drops")]
        if shown:
            values = [v for _, v in shown] if not missing else [f"{v} at k = {k}" for k, v in shown]
            said.append(f"{_joined(values)} for live {legend} draws")
        if missing:
            where = "every k" if missing == ks else "k = " + _joined([str(k) for k in missing])
            unavailable.append(f"live {legend} draws unavailable at {where}")
    against = f", against {'; '.join(said)}**" if said else "**"
    r_text = f"{draws.pop()} draws" if len(draws) == 1 else "R draws (the table gives R)"
    notes = ["95% cluster-aware intervals in brackets", f"controls: mean ± SE over {r_text}", *unavailable]
    return head + against + f" ({'; '.join(notes)})."


def targets_note(acc: Acceptance, total_heads: int, checks: dict[int, dict[str, bool]]) -> str:
    """The demo model's design targets, a note on the model (they are not the verdict on its heads)."""
    met = met_at(checks)
    state = (f"met at k = {', '.join(map(str, met))} (of {total_heads} heads)" if met else
             f"not met at any k <= 10% of the {total_heads} heads: "
             + missed_everywhere(acc.rows, acc.baseline_acc, checks).removeprefix("not met: "))
    return f"{TARGETS_NOTE} (a note on the model, not a test of its heads): {state}"


def model_markdown(chosen: DemoModel, skipped: dict[str, str]) -> str:
    """The line under the finding that names what ran (a model other than the shipped one; its folder never as an
    absolute path, as the reports show it), and what was skipped."""
    kind = "any image-text-to-text checkpoint" if chosen.choice.generic else f"family {md(chosen.family)}"
    line = (f"{MODEL_LINE} {md_code(shown_model(str(chosen.folder)))} through {md_code(chosen.model_id)} ({kind}), on "
            f"{md(chosen.scenes())}.")
    if not chosen.trained_for_demo:
        line += (" This model was not trained on the demo's scenes: the demo model's design targets do not apply, and "
                 "the drops say what its heads do on these scenes.")
    return line + "".join(f" Skipped: {md(why)}." for why in skipped.values())


def summary_markdown(acc: Acceptance, total_heads: int, seconds: float, design_targets: bool = True,
                     model_line: str | None = None) -> str:
    """demo_summary.md: the finding first, then (another model than the shipped one) which model ran, the table per k
    and, on a model trained for the demo (`design_targets`), its design targets."""
    checks = criteria(acc, total_heads)
    dead = acc.dead_heads or []
    live = total_heads - len(dead)
    lines = [finding(acc), "", *([model_line, ""] if model_line else []),
             f"Baseline Acc@0.5 on {acc.n_eval} held-out scenes: **{acc.baseline_acc:.1%}**", "",
             f"Controls are drawn from the model's {live} live heads: {len(dead)} of its {total_heads} heads write "
             "nothing (o_proj columns all zero), and a draw of them costs nothing by construction. The uniform "
             "draws over all heads (the paper's random control) are shown beside them, with how many of their heads "
             "are dead" + ("; the targets are checked against the live draws." if design_targets else "."), "",
             "Drops are in points of Acc@0.5 (percentage points); a control's drop is its mean over R draws ± SE.", "",
             "| k (share of heads) | top-k Acc | top-k drop, points [95% CI] | live random-k mean drop ± SE (R) | "
             "live layer-matched mean drop ± SE (R) | uniform random-k (all heads) mean drop ± SE (R) | "
             "uniform draws holding dead heads (dead per draw) | parse failures (top-k / worst live control) |",
             "|---|---|---|---|---|---|---|---|"]
    targets = demo_controls(targets_only=True)
    for r in acc.rows:
        lo, hi = r["topk_drop_ci"]
        worst = max(v for v in (*(r.get(f"{kind}_max_parse_failure") for kind in targets), 0.0) if v is not None)
        lines.append(f"| {r['k']} ({r['k'] / total_heads:.0%}) | {r['topk_acc']:.1%} | "
                     f"{pct_ci(r['topk_drop'], lo, hi)} | "
                     f"{_control(r, 'random')} | {_control(r, 'layer_matched')} | {_control(r, 'random_all')} | "
                     f"{_dead_share(r, 'random_all')} | {r['topk_parse_failure']:.1%} / {worst:.1%} |")
    if not design_targets:
        return "\n".join([*lines, "", f"Total time {seconds:.0f} s."]) + "\n"
    lines += ["", targets_note(acc, total_heads, checks), "",
              "Criteria (for some k <= 10% of all heads): baseline >= 80%; top-k drop >= 40 points with a CI",
              "above 0 (the report's cluster-aware interval); live random-k and live layer-matched random-k mean drops",
              "<= 10 points (a control that cannot be drawn from live heads is not met); parse failures <= 5%. These",
              "are the demo model's design targets, not a statistical test; the report (report/report.md) states",
              "what the tests support. SE: the standard error of a mean over R random draws (a mean within about one",
              "SE of 10 points could fall on either side with other draws).", ""]
    for k, k_checks in checks.items():
        row = next(r for r in acc.rows if r["k"] == k)
        shown = observed(row, acc.baseline_acc)
        failed = [f"{name} ({shown[name]})" for name, ok in k_checks.items() if not ok]
        why = f" ({md(row['layer_matched_unavailable'])})" if not row["layer_matched_drops"] and \
            row.get("layer_matched_unavailable") else ""
        lines.append(f"- k={k}: " + ("all met" if not failed else "not met: " + ", ".join(failed) + why))
    lines += ["", f"Total time {seconds:.0f} s."]
    return "\n".join(lines) + "\n"


# Drops and rates are ratios of counts (e.g. 0.1 + 0.09 + 0.11 averages to 0.10000000000000002); a bound is met when
# the value is within this of it, so a value printed as "10.0" (points) is never checked as above 10 points.
TOLERANCE = 1e-9


def at_least(value: float | None, bound: float) -> bool:
    return value is not None and value >= bound - TOLERANCE


def at_most(value: float | None, bound: float) -> bool:
    return value is not None and value <= bound + TOLERANCE


def criteria(acc: Acceptance, total_heads: int) -> dict[int, dict[str, bool]]:
    """The demo model's acceptance checks for each k <= 10% of all heads (True = met); a missing control (no draws)
    is not met."""
    out = {}
    for r in acc.rows:
        if r["k"] > 0.10 * total_heads + TOLERANCE:
            continue
        out[r["k"]] = {
            "baseline >= 80%": at_least(acc.baseline_acc, 0.80),
            "top-k drop >= 40 points": at_least(r["topk_drop"], 0.40),
            "top-k drop CI above 0": r["topk_drop_ci"][0] > 0,
            "live random-k mean drop <= 10 points": at_most(r["random_mean_drop"], 0.10),
            "live layer-matched mean drop <= 10 points": at_most(r["layer_matched_mean_drop"], 0.10),
            "parse failures <= 5%": at_most(worst_parse_failure(r), 0.05),
        }
    return out


def worst_parse_failure(row: dict) -> float:
    """The larger parse-failure rate of top-k and of the worst live control draw at one k."""
    parse = [v for v in (row.get(f"{kind}_max_parse_failure") for kind in demo_controls(targets_only=True))
             if v is not None]
    return max([row["topk_parse_failure"], *parse])


def observed(row: dict, baseline_acc: float) -> dict[str, str]:
    """What each criterion of `criteria` saw at one k (a row of the demo's acceptance figures, as in
    demo_summary.json): drops in points, rates in percent; `unavailable` for a control with no draws."""

    def mean(kind: str) -> str:
        value = row.get(f"{kind}_mean_drop")
        return "unavailable" if value is None else f"{pct(value)} points"

    return {"baseline >= 80%": f"{pct(baseline_acc)}%",
            "top-k drop >= 40 points": f"{pct(row['topk_drop'])} points",
            "top-k drop CI above 0": f"CI from {pct(row['topk_drop_ci'][0])}",
            "live random-k mean drop <= 10 points": mean("random"),
            "live layer-matched mean drop <= 10 points": mean("layer_matched"),
            "parse failures <= 5%": parse_failures_seen(row)}


def parse_failures_seen(row: dict) -> str:
    """The worst parse-failure rate at one k and whose it is: `10.0% in a live random-k draw vs 0.0% for top-k`
    (the criterion takes the worst of top-k and every live control draw)."""
    top = row["topk_parse_failure"]
    worst = worst_parse_failure(row)
    if worst <= top:
        return f"{pct(top)}% for top-k"
    kind = next(k for k in demo_controls(targets_only=True) if row.get(f"{k}_max_parse_failure") == worst)
    return f"{pct(worst)}% in a live {kinds.kind(kind).legend} draw vs {pct(top)}% for top-k"


def missed_everywhere(rows: list[dict], baseline_acc: float, checks: dict[int, dict[str, bool]]) -> str:
    """The verdict's list of what failed: each criterion missed at some k, with what it saw at each such k
    (`live random-k mean drop <= 10 points (k=5: 23.2 points, k=9: 45.5 points)`)."""
    by_k = {r["k"]: observed(r, baseline_acc) for r in rows}
    parts = []
    for name in next(iter(checks.values()), {}):
        seen = [f"k={k}: {by_k[k][name]}" for k, c in checks.items() if not c[name]]
        if seen:
            parts.append(f"{name} ({', '.join(seen)})")
    return "not met: " + "; ".join(parts) if parts else "no k <= 10% of the heads was run"


def demo_layout(out: Path) -> owned.Layout:
    """Everything a demo run writes into its folder (what --force may replace)."""
    # deferred: keeps `vrh-lmms demo --help` free of torch, transformers
    from vrh_lmms.runs.discovery.run import discovery_layout
    from vrh_lmms.runs.interventions.patch_run import PATCH_LAYOUT
    from vrh_lmms.runs.interventions.steer_run import STEER_LAYOUT
    from vrh_lmms.runs.maps import doc_views

    synth_cache = owned.folder_of({"synth": owned.folder_of({"hub-*": owned.files_matching("*.parquet"),
                                                             ".hub-*": None})})
    transfer = owned.folder_of({**discovery_layout(out / TRANSFER_DIR / "heads.json"),
                                "sweep*": owned.folder_of(SWEEP_LAYOUT)})
    recall = owned.folder_of({name: owned.folder_of(discovery_layout(out / RECALL_DIR / name / "heads.json"))
                              for name in ("backbone", "vlm")} | {"sweep*": owned.folder_of(SWEEP_LAYOUT),
                                                                   "score_maps.png": owned.is_file})
    return {**discovery_layout(out / "heads.json"), "data": synth_cache, "sweep": owned.folder_of(SWEEP_LAYOUT),
            TRANSFER_DIR: transfer, RECALL_DIR: recall, "recall.png": owned.is_file,
            doc_views.FOLDER: owned.folder_of(doc_views.LAYOUT),
            "steer": owned.folder_of(STEER_LAYOUT), "patch": owned.folder_of(PATCH_LAYOUT),
            "report": owned.folder_of(REPORT_LAYOUT), "demo_summary.json": owned.json_with("acceptance", "criteria"),
            "demo_summary.md": owned.is_file, "kcurve.png": owned.is_file, console.LOG_NAME: owned.log_file,
            runfile.RUN_FILE: runfile.is_ours,  # written by the command line when the demo ends
            "applications": None}  # demo --applications (vrh_lmms.pipelines.demo.applications)


def _finished_anything(out: Path) -> bool:
    """Whether a demo folder holds any finished unit of work (what a rerun must not discard silently)."""
    return any(p.exists() for p in (out / "heads.json", out / "demo_summary.json")) or \
        any(out.glob("heads.parts/[!.]*.npz")) or any(out.glob("sweep/configs/*/results.json"))


def _checked_inputs(model_path: str | Path | None, settings: DemoSettings) -> DemoModel:
    """The model (folder, `vrh_*` model, scenes) and the settings, checked before anything is written or loaded."""
    for name, value, low in (("--n-discovery", settings.n_discovery, 1), ("--n-eval", settings.n_eval, 1),
                             ("--random-seeds", settings.random_seeds, 0)):
        if value < low:
            raise VRHError(f"{name} must be at least {low}, got {value}")
    if any(int(k) < 1 for k in settings.ks):
        raise VRHError(f"--k values must be positive, got {list(settings.ks)}")
    chosen = demo_model(model_path)
    chosen.refuse_steps(settings.transfer_model, applications=False)
    geometry = config_geometry(load_config(str(chosen.folder)), chosen.choice.family)
    if geometry is not None and max(settings.ks, default=0) >= geometry.total_heads:
        raise VRHError(f"--k {max(settings.ks)}: the demo's layer-matched controls need k below the model's "
                       f"{geometry.total_heads} heads")
    return chosen


def checked_model(model_path: str | Path | None, settings: DemoSettings, applications: bool = False) -> DemoModel:
    """What `run_demo` checks first, plus whether the model can take `--applications` (the command line asks before
    the demo starts)."""
    chosen = _checked_inputs(model_path, settings)
    chosen.refuse_steps(settings.transfer_model, applications)
    return chosen


def run_demo(output: str | Path, settings: DemoSettings | None = None, force: bool = False,
             model_path: str | Path | None = None, progress: bool = True) -> dict[str, Any]:
    # deferred: keeps `vrh-lmms demo --help` free of torch
    from vrh_lmms.harness import lmms
    settings = settings or DemoSettings()
    started = time.time()
    out = Path(output)
    chosen = _checked_inputs(model_path, settings)
    model, spec = chosen.folder, chosen.spec
    skipped = {"recall": chosen.recall_skipped()} if settings.recall and chosen.recall_skipped() else {}
    if skipped:
        settings = replace(settings, recall=False)
    transfer_model = None
    if settings.transfer_model:
        transfer_model = checked_second_model(settings.transfer_model, model, spec)
    sweeps = [out / "sweep"]
    # An earlier demo that finished nothing (no discovery part, no configuration) is a failed start: replaced.
    owned.prepare_output(out, demo_layout(out), force=force or not _finished_anything(out),
                         what="an earlier demo run")
    out.mkdir(parents=True, exist_ok=True)
    console.log_to(out / console.LOG_NAME)  # lmms-eval's output, out of the terminal (vrh_lmms.base.console)
    model_args = chosen.model_args()
    say = console.step if progress else (lambda *a, **k: None)
    if not chosen.shipped:
        say(f"model: {chosen.describe()}")
        for why in skipped.values():
            say(f"skipped: {why}")
    with _env(VRH_CACHE_DIR=str(out / "data"), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1"):
        lm = lmms.build_model(chosen.model_id, model_args, batch_size=1)
        geometry = lm.vrh_decoder.geometry
        ks = settings.resolved_ks(geometry.total_heads)
        say(f"[1/3] discovery on {settings.n_discovery} held-out scenes "
            f"({geometry.layers} layers x {geometry.heads} heads)")
        heads = discover_heads(lm, model_args, spec, settings, out / "heads.json")
        configs = demo_plan(ks, settings.random_seeds)
        say(f"[2/3] sweep: {len(configs)} configurations (k = {', '.join(map(str, ks))}) on {settings.n_eval} "
            f"other held-out scenes")
        sweep_heads(lm, model_args, spec, settings, heads, configs, out / "sweep", progress)
        capture_doc_views(lm, model, spec, settings, out)
        if settings.transfer_model:
            sweeps += run_transfer(lm, model_args, heads, transfer_model, spec, settings, ks, out, say, progress)
        if settings.recall:
            sweeps += run_recall(lm, model_args, heads, spec, settings, min(ks), out, say, progress)
        if settings.interventions:
            t_interventions = time.time()
            run_interventions(lm, out, spec, model_args, str(heads), settings, say)
            t_interventions = time.time() - t_interventions
    say("[3/3] report")
    heads_files = (str(heads),) + ((str(out / TRANSFER_DIR / "heads.json"),) if settings.transfer_model else ())
    build_report(sweeps, out / "report", ReportSettings(heads_files=heads_files, n_resamples=settings.n_resamples))
    intervention_summary = None
    if settings.interventions:
        append_to_report(out / "report", out / "steer", out / "patch")
        intervention_summary = intervention_figures(out) | {"seconds": t_interventions}
    acc = acceptance_figures(out / "sweep", ks, settings.n_resamples)
    plot_acceptance_curve(acc, geometry.layers, geometry.heads, out / "kcurve.png", geometry.total_heads)
    seconds = time.time() - started
    checks = criteria(acc, geometry.total_heads)
    summary = {"model": str(model), "geometry": geometry.to_dict(), "settings": asdict(settings) | {"ks": ks},
               "acceptance": acc.to_dict(),
               "criteria": {str(k): v for k, v in checks.items()}, "criteria_met_at": met_at(checks),
               "seconds": seconds}
    if not chosen.shipped:  # the shipped demo's files stay as they were
        summary |= {"model_id": chosen.model_id, "family": chosen.family, "scenes": spec.to_dict(),
                    "design_targets": chosen.trained_for_demo, "skipped": skipped}
    if intervention_summary is not None:
        summary["interventions"] = intervention_summary
    if settings.recall:
        report = json.loads((out / "report" / "report.json").read_text())
        summary["recall"] = recall_summary(out, heads, report, min(ks), TASK)
        plot_recall(summary["recall"], out / "recall.png")
    if settings.transfer_model:
        summary["transfer"] = transfer_figures(json.loads((out / "report" / "report.json").read_text()))
        summary["transfer_heads"] = heads_agreement(heads, out / TRANSFER_DIR / "heads.json", ks)
    shown = summary | {"model": shown_model(summary["model"])}  # the file names no absolute path; the caller keeps it
    (out / "demo_summary.json").write_text(json.dumps(shown, indent=1))
    markdown = summary_markdown(acc, geometry.total_heads, seconds, design_targets=chosen.trained_for_demo,
                                model_line=None if chosen.shipped else model_markdown(chosen, skipped))
    if intervention_summary is not None:
        markdown += interventions_markdown(intervention_summary)
    if settings.transfer_model:
        markdown += transfer_markdown(summary["transfer"]) + agreement_markdown(summary["transfer_heads"])
    if settings.recall:
        markdown += recall_markdown(summary["recall"], "recall.png")
    markdown += "\n![k-curve](kcurve.png)\n"
    (out / "demo_summary.md").write_text(markdown)
    write_demo_html(out, model.name, markdown)
    if progress:
        show(summary, markdown, out)
    return summary


def capture_doc_views(lm, model: Path, spec, settings: DemoSettings, out: Path) -> Path:
    """What the explorer shows beyond the sample files (vrh_lmms.runs.maps.doc_views): a thumbnail of each evaluation
    scene and every head's attention over the first `settings.n_map_docs` of them."""
    # deferred: keeps `vrh-lmms demo --help` free of torch, lmms-eval
    from vrh_lmms.harness import lmms
    from vrh_lmms.runs.maps import doc_views

    with _env(VRH_SYNTH_CONFIG=_synth_config(spec, settings.n_eval, EVAL_START)):
        tm = lmms.task_manager(model_id(lm), tasks=[TASK])
        return doc_views.capture_doc_views(lm, tm, TASK, range(min(settings.n_map_docs, settings.n_eval)), out,
                                           settings.n_eval, {"model": shown_model(str(model))},
                                           gen_kwargs=f"max_new_tokens={settings.max_new_tokens}")


def run_interventions(lm, out: Path, spec, model_args: str, heads: str, settings: DemoSettings, say) -> None:
    """Steering (top-k vs random-k and layer-matched random-k at one bias) and activation patching, k = 10% of
    the heads, on held-out scenes where every uniquely nameable object has its own expression."""
    # deferred: keeps `vrh-lmms demo --help` free of torch, transformers
    from vrh_lmms.base.heads.plan import plan_configurations
    from vrh_lmms.runs.interventions.patch_run import PatchSpec, run_patching
    from vrh_lmms.runs.interventions.steer_run import SteerSpec, plan_steering, run_steering

    k = max(1, lm.vrh_decoder.geometry.total_heads // 10)
    gen = f"max_new_tokens={settings.max_new_tokens}"
    config = json.loads(_synth_config(spec, settings.n_intervention_scenes, INTERVENTION_START)) | {"objects": "all"}
    say(f"[+] interventions on {settings.n_intervention_scenes} more scenes (every object named): steering and "
        f"activation patching, k = {k}")
    with _env(VRH_SYNTH_CONFIG=json.dumps(config)):
        batch = batch_size(lm, settings.batch_size)
        lm.batch_size_per_gpu = batch
        plan = plan_configurations([k], settings.random_seeds, True, ["zero"])  # top-k and its live controls
        run_steering(SteerSpec(model=model_id(lm), model_args=model_args, tasks=[TASK], heads_file=heads,
                               configurations=plan_steering(plan, [settings.steer_bias]),
                               gen_kwargs=gen, batch_size=batch), out / "steer", lm=lm, progress=False)
        write_steering_report(out / "steer")
        lm.batch_size_per_gpu = 1
        run_patching(PatchSpec(model=model_id(lm), model_args=model_args, tasks=[TASK], heads_file=heads, ks=[k],
                               random_seeds=settings.random_seeds, gen_kwargs=gen, max_pairs=settings.patch_pairs,
                               patch_batch=32), out / "patch", lm=lm, progress=False)
        write_patching_report(out / "patch")


def intervention_figures(out: Path) -> dict[str, Any]:
    """The headline numbers of the steering and patching step, from their own output files."""
    steer = json.loads((out / "steer" / "summary.json").read_text())
    patch = json.loads((out / "patch" / "patch.json").read_text())
    row = max(steer["table"], key=lambda e: (e["bias"], e["k"])) if steer["table"] else None  # strongest steering
    figures: dict[str, Any] = {"steer_bias": None if row is None else row["bias"],
                               "k": None if row is None else row["k"],
                               "steer_n": None if row is None else row["topk"]["n"]}
    if row is not None:
        figures["moved"] = {"topk": row["topk"]["moved"], "topk_ci": row["topk"]["moved_ci"],
                            "random": (row.get("random") or {}).get("mean"),
                            "layer_matched": (row.get("layer_matched") or {}).get("mean"),
                            "baseline": (steer.get("baseline") or {}).get("moved")}
    sets = {s["kind"]: [] for s in patch["sets"]}
    for s in patch["sets"]:
        sets[s["kind"]].append(s["effect"])
    figures["patching"] = {"pairs": patch["n_pairs_used"], "spearman": patch["discovery"]["spearman"],
                           "kendall": patch["discovery"]["kendall"], "measure": patch["measure"],
                           "recovery": {kind: float(np.mean(v)) for kind, v in sets.items()},
                           "unavailable_sets": sorted(patch.get("unavailable_sets") or {}),
                           "best_head": patch["top_heads"][0]}
    return figures


def _share(value: float | None) -> str:
    """A share, or "unavailable" for a control that live heads could not supply."""
    return "unavailable" if value is None or value != value else f"{value:.1%}"


def interventions_markdown(f: dict[str, Any]) -> str:
    lines = [""]
    m = f.get("moved")
    if m:
        lines.append(f"Steering (k = {f['k']}, bias {f['steer_bias']:g}, {f['steer_n']} predictions): "
                     f"{m['topk']:.1%} of top-k predictions move onto the other object "
                     f"[{m['topk_ci'][0]:.1%}, {m['topk_ci'][1]:.1%}], random-k {_share(m['random'])}, layer-matched "
                     f"{_share(m['layer_matched'])}, unsteered {_share(m['baseline'])}.")
    p = f["patching"]
    rec = p["recovery"]
    verb = "destroy" if p.get("measure") == "destroyed" else "restore"
    lines.append(f"Patching ({p['pairs']} pairs): top-k heads {verb} {_share(rec.get('topk'))} of the "
                 f"logit difference, random-k {_share(rec.get('random'))}, layer-matched "
                 f"{_share(rec.get('layer_matched'))}; per-head {p.get('measure', 'recovery')} vs discovery score: "
                 f"Spearman {p['spearman']['rho']:.2f} (p = {p['spearman']['p']:.2g}).")
    if "seconds" in f:
        lines.append(f"Interventions step {f['seconds']:.0f} s.")
    return "\n".join(lines) + "\n"
