"""What both map commands need before capture: checked tasks, the model, the heads file fitted to it, and an
output folder that holds nothing of another run (refused, never overwritten, unless --force)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vrh_lmms.base.errors import VRHError


@dataclass
class MapsRun:
    lm: object
    tm: object
    heads_file: object  # vrh_lmms.base.heads.heads_file.HeadsFile
    tasks: list[str]


def check_output(folder: Path, result_name: str, force: bool) -> None:
    """Refuse a folder holding an earlier result (unless force) or a file that is not a folder."""
    if folder.exists() and not folder.is_dir():
        raise VRHError(f"--output {folder} is a file; give a folder")
    if (folder / result_name).exists() and not force:
        raise VRHError(f"{folder / result_name} exists; choose another --output or pass --force to replace it")


def prepare(model: str, model_args: str, tasks: str, heads_file: str, allow_cross_model: bool = False, *,
            limit: int | None = None, doc_ids: list[int] | None = None, command: str = "attention maps",
            why: str = "maps read the intact model; heads are chosen with --heads-file and --k") -> MapsRun:
    """Check the tasks and the heads file first (no weights loaded), then build the model and fit the file to it."""
    from vrh_lmms.base.heads.heads_file import load_heads_file
    from vrh_lmms.base.heads.spec import check_heads_file_fits
    from vrh_lmms.harness import lmms, preload
    from vrh_lmms.runs.discovery.evidence import check_docs

    names = [t for t in tasks.split(",") if t]
    if not names:
        raise VRHError("--tasks names no task")
    lmms.check_task_names(names)
    hf = load_heads_file(heads_file)
    plan = preload.plan_args(model, model_args)
    preload.refuse_head_args(plan.args, command, {k: why for k in preload.HEAD_ARGS})
    tm = lmms.task_manager(model, tasks=names)
    lmms.check_tasks(tm, names)
    # the boxes of the docs the run reads (`doc_ids`, else the first `limit`), before the model loads
    check_docs(tm, names, None if doc_ids else limit, set(doc_ids) if doc_ids else None)
    lm = lmms.build_model(model, model_args, batch_size=1)
    check_heads_file_fits(hf, lm.vrh_decoder.geometry, allow_cross_model=allow_cross_model)
    return MapsRun(lm=lm, tm=tm, heads_file=hf, tasks=names)
