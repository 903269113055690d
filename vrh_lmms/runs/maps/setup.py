"""What the commands that read an intact model and write one result need before capture (attention-maps, locate,
kv-cache; rank shares `run_identity`): checked tasks and heads file, the output folder inspected by the runner
(vrh_lmms.runs.runner: a one-result job), and the model, loaded through the runner only when there is work to do."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vrh_lmms.base.data_env import data_env
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.base.heads.spec import check_heads_file_fits
from vrh_lmms.runs.checks import data_identity, sha256_of
from vrh_lmms.runs.runner import Job, Runner


@dataclass
class MapsRun:
    lm: object  # None when the folder already holds this run, finished (nothing to do)
    tm: object
    heads_file: object  # vrh_lmms.base.heads.heads_file.HeadsFile
    tasks: list[str]
    runner: Runner | None = None

    @property
    def finished(self) -> bool:
        """The output folder already holds this run, finished: the command has nothing to do."""
        return self.lm is None


def run_identity(command: str, args: Mapping[str, Any], names: Iterable[str], heads_file: str,
                 tasks: list[str] = ()) -> dict[str, Any]:
    """What a one-result command's result depends on: its settings (`names` of `args`), the heads file (path and
    sha256, so a rediscovered file at the same path is another run) and the data the variables and synthetic scenes
    choose (as a sweep's identity has them). Call once the heads file has loaded."""
    extra = data_env(skip=("VRH_SYNTH_CONFIG",))
    return {"command": command, **{n: args[n] for n in names}, "heads_file": str(Path(heads_file).resolve()),
            "heads_sha256": sha256_of(heads_file), **data_identity(list(tasks)),
            **({"data": extra} if extra else {})}


def prepare(model: str, model_args: str, tasks: str, heads_file: str, allow_cross_model: bool = False, *,
            limit: int | None = None, doc_ids: list[int] | None = None, command: str = "attention maps",
            why: str = "maps read the intact model; heads are chosen with --heads-file and --k",
            job: Callable[[list[str], Any], Job] | None = None, force: bool = False) -> MapsRun:
    """Check the tasks and the heads file, inspect the output folder (`job`, given the task names and the heads
    file, which it may check: refused in one line, or finished with the same settings, then nothing loads) and check
    every doc's box, all before any weight loads; then claim the folder, build the model through the runner and fit
    the file to it."""
    # deferred: keeps `vrh-lmms rank --help` free of torch
    from vrh_lmms.harness import lmms, preload
    from vrh_lmms.runs.discovery.evidence import check_docs

    names = [t for t in tasks.split(",") if t]
    if not names:
        raise VRHError("--tasks names no task")
    lmms.check_task_names(names)
    hf = load_heads_file(heads_file)
    plan = preload.plan_args(model, model_args)
    preload.refuse_head_args(plan.args, command, {k: why for k in preload.HEAD_ARGS})
    runner = Runner(job(names, hf), force) if job is not None else None
    if runner is not None:
        runner.inspect()
    if runner is not None and runner.finished:
        return MapsRun(lm=None, tm=None, heads_file=hf, tasks=names, runner=runner)
    tm = lmms.task_manager(model, tasks=names)
    lmms.check_tasks(tm, names)
    # the boxes of the docs the run reads (`doc_ids`, else the first `limit`), before the model loads
    check_docs(tm, names, None if doc_ids else limit, set(doc_ids) if doc_ids else None)
    geometry = preload.plan_geometry(plan).geometry
    if geometry is not None:  # the checkpoint's config.json: a heads file of another model, before the folder
        check_heads_file_fits(hf, geometry, allow_cross_model=allow_cross_model)

    def load():
        return lmms.build_model(model, model_args, batch_size=1)

    if runner is not None:
        runner.claim()
    lm = runner.model(load) if runner is not None else load()
    check_heads_file_fits(hf, lm.vrh_decoder.geometry, allow_cross_model=allow_cross_model)
    return MapsRun(lm=lm, tm=tm, heads_file=hf, tasks=names, runner=runner)
