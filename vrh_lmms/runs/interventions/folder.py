"""Output folders of `vrh-lmms steer` and `vrh-lmms patch`, and the checks both run before their model loads.

Both are jobs of the runner (vrh_lmms.runs.runner): a manifest (JSON) records what was asked; a rerun with the same
identity keeps every finished piece (a piece is finished when its file or folder exists: all are written to a
temporary name and renamed, through vrh_lmms.base.atomic), a different identity is refused unless `force`, which then
removes exactly the files of the command's layout (vrh_lmms.base.owned); a folder holding anything the command did
not write is always refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from vrh_lmms.base import owned
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.base.heads.plan import check_headsets
from vrh_lmms.runs.checks import dead_heads_of
from vrh_lmms.runs.runner import Job, Runner


def beside(manifest: str, check: owned.Check) -> owned.Check:
    """A file that counts as ours only next to our manifest (a report.md, a plot)."""
    return lambda p: p.is_file() and not p.is_symlink() and check(p.with_name(manifest))


def temporaries(*names: str) -> dict[str, owned.Check]:
    """The `.<name>.*` files an atomic write of each name leaves when it is killed."""
    return {f".{name}.*": owned.is_file for name in names}


@dataclass
class Ready:
    heads_file: Any  # HeadsFile
    task_manager: Any
    runner: Runner  # the output folder, inspected (vrh_lmms.runs.runner)
    unavailable: dict[str, str] = field(default_factory=dict)  # head sets that cannot be drawn from their pool


def preflight(spec, command: str, job: Job, configurations: Sequence, force: bool, lm=None) -> Ready:
    """Every check that needs no forward pass, cheapest first, before the model loads; writes nothing. `spec`
    has model, model_args, tasks, heads_file, limit, allow_cross_model; `configurations` (id, k, seed, spec, pool)
    are the head sets the run will resolve."""
    # deferred: keeps `vrh-lmms report` free of torch
    from vrh_lmms.harness import lmms, preload
    from vrh_lmms.runs.discovery.evidence import check_docs

    if not spec.tasks:
        raise VRHError("--tasks names no task")
    lmms.check_task_names(list(spec.tasks))
    if spec.limit is not None and spec.limit <= 0:
        raise VRHError(f"--limit must be positive, got {spec.limit}")
    plan = None
    if lm is None:
        plan = preload.plan_args(spec.model, spec.model_args)
        intact = f"{command} runs on the intact model (it chooses its own head sets), so no model arg may set heads"
        preload.refuse_head_args(plan.args, command, {k: intact for k in preload.HEAD_ARGS})
    if not spec.heads_file:
        raise VRHError(f"{command} needs --heads-file")
    hf = load_heads_file(spec.heads_file)
    dead = dead_heads_of(lm, hf)
    # k against the heads file, image_mass for image-matched sets
    unavailable = check_headsets(configurations, hf.geometry, hf, dead, spec.allow_cross_model)
    runner = Runner(job, force, lm=lm)
    runner.inspect()
    tm = lmms.task_manager(spec.model, tasks=list(spec.tasks))
    lmms.check_tasks(tm, spec.tasks)
    check_docs(tm, list(spec.tasks), spec.limit)  # every doc's box, before the folder is claimed or weights load
    geometry = lm.vrh_decoder.geometry if lm is not None else preload.plan_geometry(plan).geometry
    if geometry is not None:  # the checkpoint's config.json (or the loaded model)
        unavailable = check_headsets(configurations, geometry, hf, dead, spec.allow_cross_model)
    return Ready(hf, tm, runner, unavailable)
