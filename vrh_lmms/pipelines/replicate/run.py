"""Run the paper's protocol (vrh_lmms.pipelines.replicate.plan.ReplicateSpec) stage by stage into one folder.

Stages write into their own subfolders and are recorded in `replicate.json` when finished, so an interrupted run
resumes: finished stages are skipped, and the sweeps inside a stage resume configuration by configuration (as
`vrh-lmms sweep` does). A folder holding a replication with other settings is refused (`--force` replaces it).
One model load serves every stage of a model.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vrh_lmms.base import atomic, console, owned, runfile
from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.pipelines.demo.stages import scoped_env
from vrh_lmms.pipelines.replicate.plan import ReplicateSpec
from vrh_lmms.pipelines.replicate.summary import write_summary
from vrh_lmms.runs.protocol import DISCOVER_PRESETS, SWEEP_PRESETS, scorer_cells
from vrh_lmms.runs.runner import Job, Manifest, Runner
from vrh_lmms.runs.sweep.run import SweepSpec, choose_pack, run_sweep

SCHEMA = "vrh-replicate/1"
MANIFEST = "replicate.json"
SUMMARY = "replicate.md"
LAYOUT: owned.Layout = {
    MANIFEST: owned.json_with("stages", schema_prefix="vrh-replicate/"),
    f".{MANIFEST}.*": owned.is_file,  # its atomic write's temporary
    SUMMARY: owned.is_file,
    "heads.*": None,
    "partner": None, "sweeps": None, "efficiency": None, "report": None, "data": None, "maps": None,
    "distribution": None, "compare": None, "scorers": None, "vrh-lmms.log": owned.log_file,
    runfile.RUN_FILE: runfile.is_ours,  # written by the command line when the replication ends
}


@dataclass
class Context:
    spec: ReplicateSpec
    out: Path
    progress: bool = True
    models: dict[str, Any] = field(default_factory=dict)  # "model" / "partner" -> loaded lmms-eval model

    def lm(self, which: str = "model"):
        """The loaded model (built once per run)."""
        if which not in self.models:
            # deferred: keeps `vrh-lmms replicate --help` free of torch
            from vrh_lmms.harness import lmms

            args = self.spec.model_args if which == "model" else self.spec.partner_model_args
            self.models[which] = lmms.build_model(self.spec.model, args, batch_size=1)
        return self.models[which]

    @contextmanager
    def docs(self, which: str) -> Iterator[None]:
        """The detection or evaluation docs: synthetic scene sets for the demo, else the tasks as they are."""
        values = {"VRH_CACHE_DIR": str(self.out / "data")}
        if self.spec.scenes:
            values["VRH_SYNTH_CONFIG"] = self.spec.scenes[which]
        with scoped_env(**values):
            yield

    @property
    def heads(self) -> Path:
        return self.out / "heads.json"


Stage = Callable[[Context], dict[str, Any]]


def _discover(ctx: Context, which: str, output: Path) -> Path:
    # deferred: keeps `vrh-lmms replicate --help` free of torch
    from vrh_lmms.runs.discovery.run import DiscoverySpec, run_discovery

    if output.is_file():
        load_heads_file(output)  # a finished heads file from an interrupted run: checked, kept
        return output
    args = ctx.spec.model_args if which == "model" else ctx.spec.partner_model_args
    with ctx.docs("detect"):
        limit = None if ctx.spec.scenes else ctx.spec.n_detect
        return Path(run_discovery(DiscoverySpec(model=ctx.spec.model, model_args=args,
                                                tasks=[ctx.spec.detection_task], output=str(output), limit=limit,
                                                gen_kwargs=ctx.spec.gen_kwargs,
                                                key_tokens=DISCOVER_PRESETS["paper"]["key_tokens"]),
                                  lm=ctx.lm(which)))


def _sweep(ctx: Context, which: str, tasks: list[str], heads: Path, ks: list[int], output: Path,
           controls: bool = True, cells: list[str] = ()) -> Path:
    """A packed sweep of the top-k of `heads` at `ks`, with random and random-outside draws unless `controls` is
    False (transfer: the model's own sweep already holds its controls, on the same docs)."""
    # deferred: keeps `vrh-lmms replicate --help` free of lmms_eval, torch
    from vrh_lmms.pipelines.replicate.budget import sweep_configurations

    spec = ctx.spec
    paper = SWEEP_PRESETS["paper"]
    configs = sweep_configurations(spec, ks, controls=controls, cells=cells)
    lm = ctx.lm(which)
    lm.batch_size_per_gpu = spec.batch_size
    args = spec.model_args if which == "model" else spec.partner_model_args
    with ctx.docs("eval"):
        sweep = SweepSpec(model=spec.model, model_args=args, tasks=tasks, heads_file=str(heads),
                          configurations=configs, limit=spec.limit, batch_size=spec.batch_size,
                          gen_kwargs=spec.gen_kwargs,
                          # synthetic scenes are disjoint by scene id; real tasks leave discovery's docs out
                          exclude_discovery_docs="off" if spec.scenes else paper["exclude_discovery_docs"],
                          pack=choose_pack(None, lm, len(configs), spec.batch_size),
                          control_docs=spec.control_docs)
        return run_sweep(sweep, output, lm=lm, progress=ctx.progress)


def stage_discovery(ctx: Context) -> dict[str, Any]:
    heads = _discover(ctx, "model", ctx.heads)
    return {"files": [str(heads.relative_to(ctx.out))]}


def stage_grounding(ctx: Context) -> dict[str, Any]:
    cells = []
    if ctx.spec.compare_cells:
        hf = load_heads_file(ctx.heads)
        cells = [c for c in scorer_cells(ctx.spec.compare_cells, hf.scoring.get("cell") or "") if c in hf.cells]
    out = _sweep(ctx, "model", ctx.spec.grounding_tasks, ctx.heads, ctx.spec.ks, ctx.out / "sweeps" / "grounding",
                 cells=cells)
    return {"files": [str(out.relative_to(ctx.out))]}


def stage_vqa(ctx: Context) -> dict[str, Any]:
    out = _sweep(ctx, "model", ctx.spec.vqa_tasks, ctx.heads, [ctx.spec.vqa_k], ctx.out / "sweeps" / "vqa")
    return {"files": [str(out.relative_to(ctx.out))]}


def stage_efficiency(ctx: Context) -> dict[str, Any]:
    # deferred: keeps `vrh-lmms replicate --help` free of torch
    from vrh_lmms.runs.discovery.efficiency import write_efficiency

    rows, k, _ = write_efficiency(ctx.heads, ctx.out / "efficiency", detailed=False)
    return {"files": ["efficiency/efficiency.md", "efficiency/efficiency.png"], "k": k,
            "rows": [r.__dict__ for r in rows]}


def stage_distribution(ctx: Context) -> dict[str, Any]:
    """Share of heads above the paper's thresholds and the sorted scores (Fig 5)."""
    # deferred: keeps `vrh-lmms replicate --help` free of matplotlib, scipy, statsmodels
    from vrh_lmms.report.compare_plots import distribution_plot
    from vrh_lmms.report.head_compare import load_inputs
    from vrh_lmms.report.score_distribution import PAPER_THRESHOLDS, distribution, distribution_markdown

    items = load_inputs([str(ctx.heads)])
    block = distribution(items, list(PAPER_THRESHOLDS))
    out = ctx.out / "distribution"
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_json(out / "distribution.json", block)
    distribution_plot(items, list(PAPER_THRESHOLDS), out / "distribution.png")
    atomic.write_text(out / "distribution.md", distribution_markdown(block, "distribution.png"))
    return {"files": ["distribution/distribution.md", "distribution/distribution.png"], "block": block}


def _compare_heads(ctx: Context, files: list[Path], k: int) -> dict[str, Any]:
    """Top-k overlap (against chance), Jaccard and Spearman between two heads files (Fig 7, Table A13)."""
    # deferred: keeps `vrh-lmms replicate --help` free of matplotlib, scipy, statsmodels
    from vrh_lmms.report.compare_plots import score_maps_plot
    from vrh_lmms.report.head_compare import compare, compare_markdown, load_inputs

    items = load_inputs([str(f) for f in files])
    block = compare(items, k)
    out = ctx.out / "compare"
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_json(out / "compare.json", block)
    score_maps_plot(items, block, out / "compare.png")
    atomic.write_text(out / "compare.md", compare_markdown(block, "compare.png"))
    return block


def stage_maps(ctx: Context) -> dict[str, Any]:
    """Attention over the image of a few evaluation docs: all heads, the top-k VRHs, all but them (Figs A1/A2)."""
    # deferred: keeps `vrh-lmms replicate --help` free of torch, scipy
    from vrh_lmms.harness import lmms
    from vrh_lmms.runs.maps.collect import collect_maps
    from vrh_lmms.runs.maps.locator import LocatorSettings
    from vrh_lmms.runs.maps.outputs import png_name, write_maps

    spec = ctx.spec
    hf = load_heads_file(ctx.heads)
    k = min(max(spec.ks), len(hf.ranking))
    task = spec.grounding_tasks[0]
    lm = ctx.lm("model")
    lm.batch_size_per_gpu = 1  # maps are captured one doc at a time
    with ctx.docs("eval"):
        maps = collect_maps(lm, [task], lmms.task_manager(spec.model, tasks=[task]), spec.map_docs, None, "answer",
                            gen_kwargs=spec.gen_kwargs, keep_images=True)
    out = ctx.out / "maps"
    path = write_maps(maps, hf.ranking[:k], LocatorSettings(), out,
                      {"model": spec.model, "model_args": spec.model_args, "tasks": [task],
                       "heads_file": str(ctx.heads.resolve()), "rows": "answer"})
    return {"files": [str(path.relative_to(ctx.out))] + [f"maps/{png_name(m)}" for m in maps], "k": k}


def stage_transfer(ctx: Context) -> dict[str, Any]:
    partner_heads = _discover(ctx, "partner", ctx.out / "partner" / "heads.json")
    task = ctx.spec.grounding_tasks[:1]
    a = _sweep(ctx, "model", task, partner_heads, ctx.spec.ks, ctx.out / "sweeps" / "transfer_partner_heads_on_model",
               controls=False)
    own = _sweep(ctx, "partner", task, partner_heads, ctx.spec.ks, ctx.out / "sweeps" / "partner_own")
    b = _sweep(ctx, "partner", task, ctx.heads, ctx.spec.ks, ctx.out / "sweeps" / "transfer_model_heads_on_partner",
               controls=False)
    k = min(max(ctx.spec.ks), ctx.lm("model").vrh_decoder.geometry.total_heads)
    block = _compare_heads(ctx, [ctx.heads, partner_heads], k)
    return {"files": [str(p.relative_to(ctx.out)) for p in (partner_heads, a, own, b)] + ["compare/compare.md"],
            "pairs": block["pairs"]}


def stage_report(ctx: Context) -> dict[str, Any]:
    # deferred: keeps `vrh-lmms replicate --help` free of matplotlib, scipy, statsmodels
    from vrh_lmms.report.build import ReportSettings, build_report

    sweeps = sorted(p for p in (ctx.out / "sweeps").iterdir() if (p / "sweep.json").is_file())
    sweeps += [ctx.out / "maps"] if (ctx.out / "maps").is_dir() else []  # the report's attention-map panel
    heads = [str(ctx.heads)] + ([str(ctx.out / "partner" / "heads.json")]
                                if (ctx.out / "partner" / "heads.json").is_file() else [])
    report = build_report(sweeps, ctx.out / "report", ReportSettings(heads_files=tuple(heads), force=True,
                                                                     n_resamples=2000))
    summary = write_summary(ctx.out, ctx.spec, report)
    return {"files": ["report/report.md", "report/report.html", str(summary.relative_to(ctx.out))]}


def stages(spec: ReplicateSpec) -> list[tuple[str, str, Stage]]:
    """(name, what it reproduces, function) in run order; stages the spec does not ask for are left out."""
    out: list[tuple[str, str, Stage]] = [
        ("discovery", f"heads from {spec.n_detect} detection docs of {spec.detection_task}", stage_discovery),
        ("grounding", f"k-curves at k = {', '.join(map(str, spec.ks))} with random-outside and random controls "
                      f"(Fig 4, Table A1, Fig 6)" + (f", and the top-k of the {spec.compare_cells} scoring cells "
                                                     "(Figs 2/3/8b, Table A8)" if spec.compare_cells else ""),
         stage_grounding),
    ]
    if spec.vqa_tasks:
        out.append(("vqa", f"cross-task: top-{spec.vqa_k} masked on {', '.join(spec.vqa_tasks)} (Table 3)",
                    stage_vqa))
    out.append(("efficiency", "top-k overlap with all detection docs as n varies (Fig 8c)", stage_efficiency))
    out.append(("distribution", "share of heads above the paper's score thresholds (Fig 5)", stage_distribution))
    if spec.map_docs:
        out.append(("maps", f"attention over the image of evaluation docs {', '.join(map(str, spec.map_docs))}: "
                            "all heads, top-k, all but the top-k (Figs A1/A2)", stage_maps))
    if spec.partner_model_args:
        out.append(("transfer", "the partner model's heads and this model's, masked on each other (Fig 7)",
                    stage_transfer))
    out.append(("report", "statistics, plots and the comparison with the paper", stage_report))
    return out


def replicate_job(spec: ReplicateSpec, out: Path, manifest: dict[str, Any]) -> Job:
    """The replication as the runner's job (vrh_lmms.runs.runner): its identity is the spec (`spec` in
    replicate.json), its units the stages, recorded done in `manifest["stages"]` (they write into their own
    subfolders, which resume themselves). A folder of ours without replicate.json (a run that earlier versions
    stopped inside its first stage) resumes."""
    return Job(out=out, layout=LAYOUT, manifest=Manifest(out / MANIFEST, key="spec"), identity=spec.to_dict(),
               units=[name for name, _, _ in stages(spec)], what="replication", unit="stage", units_key=None,
               fields=lambda: {k: v for k, v in manifest.items() if k != "spec"}, log=out / console.LOG_NAME,
               done_in_manifest=lambda m: [n for n, s in (m.get("stages") or {}).items()
                                           if isinstance(s, dict) and s.get("status") == "done"],
               resume_without_manifest=True)


def print_plan(ctx: Context, calibrate_docs: int) -> dict[str, Any]:
    """Print the generations each stage will run and, after timing `calibrate_docs` generations on the first
    grounding task (0: no calibration), the time they take at that rate; returns the plan for the manifest."""
    # deferred: keeps `vrh-lmms replicate --help` free of lmms_eval, torch
    from vrh_lmms.pipelines.replicate.budget import (
        calibrate,
        count_control_docs,
        count_docs,
        plan_generations,
        plan_text,
    )

    spec = ctx.spec
    tasks = list(dict.fromkeys(spec.grounding_tasks + spec.vqa_tasks))
    skip = {} if spec.scenes else {spec.detection_task: spec.n_detect}  # real tasks leave discovery's docs out
    with ctx.docs("eval"):
        docs = count_docs(spec.model, tasks, spec.limit, skip)
        subset = (count_control_docs(spec.model, tasks, spec.limit, skip, spec.control_docs)
                  if spec.control_docs is not None else None)
        rate = (calibrate(ctx.lm(), spec.grounding_tasks[0], calibrate_docs, spec.gen_kwargs, spec.model)
                if calibrate_docs > 0 else None)
    planned = plan_generations(spec, docs, subset)
    console.note(plan_text(planned, rate))
    return {"seconds_per_generation": rate, "docs": docs,
            "generations": {p.stage: p.generations for p in planned}} | (
        {"control_docs": subset, "control_generations": {p.stage: p.control_generations for p in planned},
         "control_generations_on_all_docs": {p.stage: p.controls * p.docs for p in planned}} if subset else {})


def run_replicate(spec: ReplicateSpec, output: str | Path, force: bool = False, progress: bool = True,
                  calibrate_docs: int = 4) -> Path:
    """Run every stage not yet finished, after printing the plan (vrh_lmms.pipelines.replicate.budget); returns the
    summary (replicate.md)."""
    spec.check()
    # deferred: keeps `vrh-lmms replicate --help` free of lmms_eval
    from vrh_lmms.harness import preload

    preload.check_batch_size(spec.model, preload.model_class(spec.model), spec.batch_size)
    out = Path(output)
    manifest: dict[str, Any] = {"schema": SCHEMA, "stages": {}}
    runner = Runner(replicate_job(spec, out, manifest), force)
    runner.inspect()
    manifest.update({k: v for k, v in (runner.recorded() or {}).items() if k != "spec"})
    runner.claim()
    ctx = Context(spec, out, progress)
    plan = stages(spec)
    if runner.pending:
        manifest["plan"] = print_plan(ctx, calibrate_docs)
    for i, (name, what, fn) in enumerate(plan, 1):
        if name in runner.done:
            console.step(f"[{i}/{len(plan)}] {name}: done before, kept")
            continue
        console.step(f"[{i}/{len(plan)}] {name}: {what}")
        started = time.time()
        record = fn(ctx)
        manifest["stages"][name] = {"status": "done", "what": what, "seconds": round(time.time() - started, 1),
                                    **record}
        runner.finish(name)
    return out / SUMMARY
