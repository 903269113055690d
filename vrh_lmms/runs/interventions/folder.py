"""Output folders of `vrh-lmms steer` and `vrh-lmms patch`, and the checks both run before their model loads.

A manifest (JSON) records what was asked; a rerun with the same identity keeps every finished piece (a piece is
finished when its file or folder exists: all are written to a temporary name and renamed, through vrh_lmms.base.atomic),
a different identity is refused unless `force`, which then removes exactly the files of the command's layout
(vrh_lmms.base.owned); a folder holding anything the command did not write is always refused.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vrh_lmms.base import atomic, owned
from vrh_lmms.base.errors import VRHError


def write_json(path: Path, data: Any) -> Path:
    """Atomic JSON write with umask modes (vrh_lmms.base.atomic)."""
    return atomic.write_text(path, json.dumps(data, indent=1))


def beside(manifest: str, check: owned.Check) -> owned.Check:
    """A file that counts as ours only next to our manifest (a report.md, a plot)."""
    return lambda p: p.is_file() and not p.is_symlink() and check(p.with_name(manifest))


def temporaries(*names: str) -> dict[str, owned.Check]:
    """The `.<name>.*` files an atomic write of each name leaves when it is killed."""
    return {f".{name}.*": owned.is_file for name in names}


@dataclass
class FolderState:
    """What `claim_folder` will do: resume the same run, or remove our files of another run first."""

    out: Path
    resume: bool
    clear: bool


def inspect_folder(out: Path, manifest: str, layout: owned.Layout, identity: dict[str, Any],
                   force: bool) -> FolderState:
    """Decide about `out` without changing it; refusals are raised here (see the module doc)."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise VRHError(f"--output {out} exists and is not a folder; choose another --output")
    if not out.exists() or not any(out.iterdir()):
        return FolderState(out, resume=False, clear=False)
    owned.refuse_foreign(out, owned.foreign_entries(out, layout))
    path = out / manifest
    old = json.loads(path.read_text()).get("identity", {}) if path.is_file() else None
    if old is not None:
        differs = [k for k in sorted(set(identity) | set(old)) if old.get(k) != identity.get(k)]
        if not differs:
            return FolderState(out, resume=True, clear=False)
    else:
        differs = [f"no {manifest}"]
    if not force:
        raise VRHError(f"{out} holds a different run ({', '.join(differs)} differ); choose another --output or "
                       f"pass --force to discard it")
    return FolderState(out, resume=False, clear=True)


def claim_folder(state: FolderState, layout: owned.Layout) -> None:
    """Apply `inspect_folder`'s decision: remove our files of an unresumable run (nothing else), create `out`."""
    if state.clear:
        for path in owned.owned_entries(state.out, layout):
            owned.remove(path)
    state.out.mkdir(parents=True, exist_ok=True)


@dataclass
class Ready:
    heads_file: Any  # HeadsFile
    task_manager: Any
    folder: FolderState
    unavailable: dict[str, str] = field(default_factory=dict)  # head sets that cannot be drawn from their pool


def preflight(spec, command: str, out: Path, manifest: str, layout: owned.Layout, identity: dict[str, Any],
              configurations: Sequence, force: bool, lm=None) -> Ready:
    """Every check that needs no forward pass, cheapest first, before the model loads; writes nothing. `spec`
    has model, model_args, tasks, heads_file, limit, allow_cross_model; `configurations` (id, k, seed, spec, pool)
    are the head sets the run will resolve."""
    from vrh_lmms.base.heads.heads_file import load_heads_file
    from vrh_lmms.harness import lmms, preload
    from vrh_lmms.runs.discovery.evidence import check_docs
    from vrh_lmms.runs.sweep.checks import check_headsets, dead_heads_of

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
    folder = inspect_folder(out, manifest, layout, identity, force)
    tm = lmms.task_manager(spec.model, tasks=list(spec.tasks))
    lmms.check_tasks(tm, spec.tasks)
    check_docs(tm, list(spec.tasks), spec.limit)  # every doc's box, before the folder is claimed or weights load
    geometry = lm.vrh_decoder.geometry if lm is not None else preload.plan_geometry(plan).geometry
    if geometry is not None:  # the checkpoint's config.json (or the loaded model)
        unavailable = check_headsets(configurations, geometry, hf, dead, spec.allow_cross_model)
    return Ready(hf, tm, folder, unavailable)
