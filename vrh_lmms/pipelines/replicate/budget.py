"""What a replication will cost before it starts: generations per stage, and the time they take at a rate measured
on this model (a short calibration: a few generations timed through lmms-eval first).

On a real model the grounding sweep alone is ~136 configurations per grounding set (baseline; per k the top-k, the
random and random-outside draws and the other scoring cells' top-k), so the plan says where the generations go
before the hours are spent. Control draws are most of them; with `--control-docs N` they run on a seeded image
subset of N docs per task (vrh_lmms.runs.sweep.control_docs; the plan counts that subset exactly and shows the
control generations with and without it); benchmarks/sim_control_docs.py measures the precision it keeps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from vrh_lmms.base.heads.plan import plan_configurations
from vrh_lmms.harness import doc_subset, lmms
from vrh_lmms.pipelines.replicate.plan import ReplicateSpec
from vrh_lmms.runs.discovery.scoring import parse_cells
from vrh_lmms.runs.protocol import DISCOVER_PRESETS, SWEEP_PRESETS, scorer_cells
from vrh_lmms.runs.sweep.control_docs import draw


@dataclass(frozen=True)
class StagePlan:
    """Generations of one stage: `configurations` x `docs` (+ `extra`: discovery's or the maps' docs); the
    `controls` among the configurations evaluate `control_docs` docs each where the sweep has --control-docs."""

    stage: str
    configurations: int
    docs: int
    controls: int  # of the configurations, control draws (random, random-outside)
    extra: int = 0
    control_docs: int | None = None  # docs each control draw evaluates (the subset); None: `docs`

    @property
    def control_generations(self) -> int:
        return self.controls * (self.docs if self.control_docs is None else self.control_docs)

    @property
    def generations(self) -> int:
        return (self.configurations - self.controls) * self.docs + self.control_generations + self.extra


def sweep_configurations(spec: ReplicateSpec, ks: list[int], controls: bool = True, cells: list[str] = ()):
    """The configurations of one of the replication's sweeps (the paper's controls unless `controls` is False)."""
    paper = SWEEP_PRESETS["paper"]
    return plan_configurations(ks, spec.random_seeds if controls else 0, False, ["zero"], random=controls,
                               controls=paper["controls"] if controls else [], cells=cells)


def planned_cells(spec: ReplicateSpec) -> list[str]:
    """The scoring cells the grounding sweep will also mask, before the heads file exists (its primary cell is the
    discovery preset's)."""
    if not spec.compare_cells:
        return []
    return scorer_cells(spec.compare_cells, parse_cells(DISCOVER_PRESETS["paper"]["scoring"])[0])


def _controls(configs) -> int:
    return sum(1 for c in configs if c.seed is not None)  # seeded draws: the random and random-outside controls


def plan_generations(spec: ReplicateSpec, docs: dict[str, int], control_docs: dict[str, int] | None = None
                     ) -> list[StagePlan]:
    """Per generating stage, its configurations and docs; `docs`: evaluation docs per task (discovery's left out);
    `control_docs`: per task the docs of the controls' subset (count_control_docs), None: controls on every doc."""
    def n(tasks: list[str]) -> int:
        return sum(docs[t] for t in tasks)

    def stage(name: str, configs, tasks: list[str]) -> StagePlan:
        sub = None if control_docs is None else sum(control_docs[t] for t in tasks)
        return StagePlan(name, len(configs), n(tasks), _controls(configs), 0, sub)

    out = [StagePlan("discovery", 0, 0, 0, spec.n_detect),
           stage("grounding", sweep_configurations(spec, spec.ks, cells=planned_cells(spec)), spec.grounding_tasks)]
    if spec.vqa_tasks:
        out.append(stage("vqa", sweep_configurations(spec, [spec.vqa_k]), spec.vqa_tasks))
    if spec.map_docs:
        out.append(StagePlan("maps", 0, 0, 0, len(spec.map_docs)))
    if spec.partner_model_args:
        first = spec.grounding_tasks[:1]
        bare = sweep_configurations(spec, spec.ks, controls=False)
        own = sweep_configurations(spec, spec.ks)
        out.append(StagePlan("transfer", 2 * len(bare) + len(own), n(first),
                             _controls(own), spec.n_detect,
                             None if control_docs is None else sum(control_docs[t] for t in first)))
    return out


def count_docs(model: str, tasks: list[str], limit: int | None = None, skip: dict[str, int] | None = None
               ) -> dict[str, int]:
    """Docs each task (or each task of a group, summed) evaluates, less the `skip` leading docs (discovery's), at
    most `limit`: counted on lmms-eval's own task objects (vrh_lmms.harness.lmms.count_docs)."""
    return lmms.count_docs(lmms.task_manager(model, tasks=tasks), tasks, limit, skip)


def count_control_docs(model: str, tasks: list[str], limit: int | None, skip: dict[str, int] | None, n: int,
                       seed: int = 0) -> dict[str, int]:
    """Docs of each task's control subset (`--control-docs n`, the sweep's seed): drawn as the sweep draws it, from
    the docs the sweep evaluates (the `skip` leading docs left out), summed over a group's tasks."""
    tm = lmms.task_manager(model, tasks=tasks)
    return {task: sum(c["n_docs"] for c in draw(doc_subset.doc_images(tm, [task], limit, skip), n, seed)
                      .counts.values()) for task in tasks}


def calibrate(lm, task: str, n_docs: int, gen_kwargs: str | None, model: str) -> float:
    """Seconds per generation of `n_docs` docs of `task` through lmms-eval (unpacked, the model as loaded; the first
    call's set-up included, so an upper bound for packed sweeps)."""
    tm = lmms.task_manager(model, tasks=[task])
    start = time.perf_counter()
    lmms.evaluate(lm, [task], tm, limit=n_docs, gen_kwargs=gen_kwargs)
    return (time.perf_counter() - start) / max(1, n_docs)


def plan_text(stages: list[StagePlan], seconds_per_generation: float | None) -> str:
    """The plan as printed before a replication starts."""
    total = sum(s.generations for s in stages)
    controls = sum(s.control_generations for s in stages)
    on_all = sum(s.controls * s.docs for s in stages)
    lines = ["plan: generations per stage" + (f" (calibrated: {seconds_per_generation:.3g} s per generation, "
                                              "unpacked; packed sweeps are faster)" if seconds_per_generation else "")]
    for s in stages:
        subset = s.control_docs is not None and s.controls
        what = (f"{s.configurations - (s.controls if subset else 0)} configurations x {s.docs} docs"
                if s.configurations else "") + (f" + {s.controls} controls x {s.control_docs} docs" if subset
                                                else "") + (
            f"{' + ' if s.configurations else ''}{s.extra} docs" if s.extra else "")
        est = f", ~{_duration(s.generations * seconds_per_generation)}" if seconds_per_generation else ""
        lines.append(f"  {s.stage:<10} {s.generations:>10,} ({what}{est})")
    est = f", ~{_duration(total * seconds_per_generation)} at the calibrated rate" if seconds_per_generation else ""
    subset = any(s.control_docs is not None for s in stages)
    lines.append(f"  {'total':<10} {total:>10,}{est}; control draws: {controls:,} "
                 f"({100 * controls / max(total, 1):.0f}%)" + (
                     f" on the --control-docs subset, {on_all:,} on all docs (total {total - controls + on_all:,})"
                     if subset else ""))
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
