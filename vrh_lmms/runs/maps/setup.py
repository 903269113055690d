"""What the commands that read an intact model and write one result need before capture (attention-maps, locate,
kv-cache; rank shares `run_identity` and `load_checked`): the corridor's checks (vrh_lmms.runs.preflight: tasks,
heads file, the output folder inspected by the runner as a one-result job, every doc, the geometry), and the model,
loaded through the runner only when there is work to do."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vrh_lmms.base.heads.spec import check_heads_file_fits
from vrh_lmms.runs.checks import data_identity, sha256_of
from vrh_lmms.runs.preflight import Checks, Ready, every_doc, preflight
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
    return {"command": command, **{n: args[n] for n in names}, "heads_file": str(Path(heads_file).resolve()),
            "heads_sha256": sha256_of(heads_file), **data_identity(list(tasks))}


def prepare(model: str, model_args: str, tasks: str, heads_file: str, allow_cross_model: bool = False, *,
            limit: int | None = None, doc_ids: list[int] | None = None, command: str = "attention maps",
            why: str = "maps read the intact model; heads are chosen with --heads-file and --k",
            job: Callable[[list[str], Any], Job] | None = None, force: bool = False) -> MapsRun:
    """The corridor (vrh_lmms.runs.preflight) for a command that reads the intact model and writes one result:
    tasks, model args, heads file, the output folder (`job`, given the task names and the heads file, which it may
    check: refused in one line, or finished with the same settings, then nothing loads), every doc's box (`doc_ids`,
    else the first `limit`) and the checkpoint's geometry, all before any weight loads; then claim the folder,
    build the model through the runner and fit the heads file to it."""
    # deferred: keeps `vrh-lmms rank --help` free of torch
    from vrh_lmms.harness import lmms

    checks = Checks(command, model, model_args, tasks.split(","), heads_file, head_args=why,
                    allow_cross_model=allow_cross_model, stop_when_finished=True,
                    job=None if job is None else lambda ready: job(ready.tasks, ready.heads_file),
                    docs=every_doc(limit, doc_ids))
    ready = preflight(checks, force)
    if ready.finished:
        return MapsRun(lm=None, tm=None, heads_file=ready.heads_file, tasks=ready.tasks, runner=ready.runner)
    return MapsRun(lm=load_checked(ready, lambda: lmms.build_model(model, model_args, batch_size=1),
                                   allow_cross_model),
                   tm=ready.task_manager, heads_file=ready.heads_file, tasks=ready.tasks, runner=ready.runner)


def load_checked(ready: Ready, load: Callable[[], Any], allow_cross_model: bool = False):
    """Claim the checked folder, load the model once (through the runner) and fit the heads file to it."""
    runner = ready.runner
    if runner is not None:
        runner.claim()
    lm = runner.model(load) if runner is not None else load()
    if ready.heads_file is not None:
        check_heads_file_fits(ready.heads_file, lm.vrh_decoder.geometry, allow_cross_model=allow_cross_model)
    return lm
