"""The corridor's first leg: one pre-load check sequence for every job of the runner (vrh_lmms.runs.runner).

A job declares its `Checks` (what it runs on, its own argument checks, the head sets it will resolve, its folder,
its docs) and `preflight` runs them in one order, before anything is written or loaded, each step handing what it
found to the next:

1. the job's own settings (`settings`: --limit, --batch-size, --k, ...), the cheapest;
2. the task names (a text search of the task YAMLs, under a second);
3. the model name and model args (the backend class's constructor; a model arg that would choose heads is refused:
   the job chooses its own; a batch size beyond the wrapper's limit is refused);
4. the heads file (loaded once), what the job reads beside it (`with_heads_file`: means, the docs discovery used),
   and every head set against the heads file's geometry;
5. the output folder (`job`: the runner inspects it; a folder of this run, finished, ends a one-result job here);
6. the tasks (lmms-eval's TaskManager) and every doc the run reads (`docs`: its box or evidence, or the job's own
   data set);
7. the checkpoint's geometry (its config.json, no weights) against the heads file and every head set.

Then the job claims the folder, loads the model once (`Runner.model`) and checks the head sets against the loaded
model through the same `HeadSets`, which hands each head set forward: drawn once where the shapes agree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.base.heads.plan import HeadSets, check_headsets
from vrh_lmms.base.heads.spec import check_heads_file_fits
from vrh_lmms.runs.checks import dead_heads_of
from vrh_lmms.runs.runner import Job, Runner


@dataclass
class Ready:
    """What the checks found, handed forward to the job (and to the later checks)."""

    tasks: list[str]
    plan: Any = None  # vrh_lmms.harness.preload.ModelPlan (None when the model was given, already loaded)
    heads_file: Any = None  # HeadsFile | None
    headsets: HeadSets | None = None  # every head set, resolved once per shape
    unavailable: dict[str, str] = field(default_factory=dict)  # head sets that cannot be drawn from their pool
    runner: Runner | None = None  # the output folder, inspected
    task_manager: Any = None
    docs: Any = None  # what the docs check returned (a job's own data set)
    geometry: Any = None  # the checkpoint's (config.json) or the loaded model's; None where neither is known
    found: dict[str, Any] = field(default_factory=dict)  # what the job's own checks found (means, offsets)

    @property
    def finished(self) -> bool:
        """The folder already holds this run, finished: a one-result job has nothing to do."""
        return self.runner is not None and self.runner.finished


@dataclass
class Checks:
    """A job's pre-load checks, declared; `preflight` runs them in its one order (see the module doc)."""

    command: str  # `vrh-lmms <command>` in refusals
    model: str
    model_args: str | None
    tasks: Sequence[str] | None = ()  # None: the job reads no lmms-eval task (rank reads its own data)
    heads_file: str | None = None
    needs_heads_file: bool = False  # refused in one line without one
    head_args: Mapping[str, str] | str = "it is set by the command"  # why a head-choosing model arg is refused
    batch_size: int | None = None  # docs per call: refused beyond the wrapper's limit (preload.check_batch_size)
    configurations: Sequence = ()  # the head sets the run resolves (base.heads.plan.check_headsets)
    allow_cross_model: bool = False
    settings: Callable[[], None] | None = None  # the job's own argument checks
    with_model_plan: Callable[[Any], None] | None = None  # more checks of the planned model args
    with_heads_file: Callable[[Ready], None] | None = None  # what needs the heads file (fills Ready.found)
    job: Callable[[Ready], Job] | None = None  # the output folder, declared once the heads file is known
    docs: Callable[[Ready], Any] | None = None  # every doc the run reads, checked before any weight loads
    stop_when_finished: bool = False  # a finished one-result job stops at its folder: no tasks, no geometry


def every_doc(limit: int | float | None = None, doc_ids: Sequence[int] | None = None, *, read: bool = True,
              evidence: bool = True) -> Callable[[Ready], None]:
    """The docs check of a run over lmms-eval tasks, of every doc it reads (`doc_ids`, else the first `limit`):
    `read`, its images opened and decoded, its box inside the image, its expression not blank
    (vrh_lmms.runs.doc_check); `evidence`, the evidence its kind reads (vrh_lmms.runs.discovery.evidence)."""

    def check(ready: Ready) -> None:
        # deferred: keeps `vrh-lmms report` free of torch
        from vrh_lmms.runs.discovery.evidence import check_docs
        from vrh_lmms.runs.doc_check import check_run_docs

        limited, only = (None, set(doc_ids)) if doc_ids else (limit, None)
        if read:
            check_run_docs(ready.task_manager, ready.tasks, limited, only)
        if evidence:
            check_docs(ready.task_manager, ready.tasks, limited, only)

    return check


def preflight(checks: Checks, force: bool = False, lm=None) -> Ready:
    """Every check that needs no forward pass, in the corridor's order; writes nothing. `lm`: a model already loaded
    (the API, the pipelines), whose own geometry and dead heads are checked instead of config.json's."""
    # deferred: keeps `vrh-lmms report` free of torch
    from vrh_lmms.harness import lmms, preload

    if checks.settings is not None:
        checks.settings()
    ready = Ready(tasks=[t for t in checks.tasks or () if t])
    if checks.tasks is not None:
        if not ready.tasks:
            raise VRHError("--tasks names no task")
        lmms.check_task_names(ready.tasks)
    if lm is None:
        ready.plan = preload.plan_args(checks.model, checks.model_args)
        why = checks.head_args
        preload.refuse_head_args(ready.plan.args, checks.command,
                                 why if isinstance(why, Mapping) else {k: why for k in preload.HEAD_ARGS})
        if checks.batch_size is not None:
            preload.check_batch_size(checks.model, ready.plan.cls, checks.batch_size)
        if checks.with_model_plan is not None:
            checks.with_model_plan(ready.plan)
    if checks.needs_heads_file and not checks.heads_file:
        raise VRHError(f"{checks.command} needs --heads-file")
    ready.heads_file = load_heads_file(checks.heads_file) if checks.heads_file else None
    if checks.with_heads_file is not None:
        checks.with_heads_file(ready)
    dead = dead_heads_of(lm, ready.heads_file)
    ready.headsets = HeadSets(ready.heads_file, checks.allow_cross_model)
    if ready.heads_file is not None and checks.configurations:  # k against the heads file; the model's follows
        ready.unavailable = check_headsets(checks.configurations, ready.heads_file.geometry, ready.heads_file, dead,
                                           checks.allow_cross_model, ready.headsets)
    if checks.job is not None:
        ready.runner = Runner(checks.job(ready), force, lm=lm)
        ready.runner.inspect()
        if checks.stop_when_finished and ready.runner.finished:
            return ready
    if checks.tasks is not None:
        ready.task_manager = lmms.task_manager(checks.model, tasks=ready.tasks)
        lmms.check_tasks(ready.task_manager, ready.tasks)
    if checks.docs is not None:
        ready.docs = checks.docs(ready)
    ready.geometry = lm.vrh_decoder.geometry if lm is not None else preload.plan_geometry(ready.plan).geometry
    if ready.geometry is not None:  # the checkpoint's config.json: a heads file of another model, k beyond its heads
        if checks.configurations:
            ready.unavailable = check_headsets(checks.configurations, ready.geometry, ready.heads_file, dead,
                                               checks.allow_cross_model, ready.headsets)
        elif ready.heads_file is not None:
            check_heads_file_fits(ready.heads_file, ready.geometry, allow_cross_model=checks.allow_cross_model)
    return ready
