"""A per-user registry of the heads files `vrh-lmms discover` wrote, keyed by checkpoint and task, so that
`heads=top20` in model args works without `heads_file=` once discovery has run on that checkpoint.

The registry is one JSON file: `$VRH_HEADS_REGISTRY`, else `~/.cache/vrh-lmms/heads-registry.json`. A checkpoint is
its resolved local path (a folder) or its hub id, plus the sha256 of its config.json where one is on disk, so a
folder whose weights were replaced by another model's is not matched by path alone. Later registrations of the same
checkpoint and task replace earlier ones; a run records which file it used (`vrh.ablation.heads_file`, with
`source: "registry"`). A registration reads and rewrites the file under its own lock (`<registry>.lock`, filelock), so
discoveries that finish at the same moment all keep their entries.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from vrh_lmms.base import atomic
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.pretrained import demo_folder

ENV = "VRH_HEADS_REGISTRY"
LOCK_TIMEOUT = 60.0  # seconds a registration waits for another one (each holds the lock for milliseconds)
SCHEMA = "vrh-heads-registry/1"
SHIPPED_HEADS = "heads.json"  # the demo model's own heads file, in its folder
SHIPPED_TASK = "vrh_demo_discovery"  # the task they were found on


def registry_path() -> Path:
    return Path(os.environ.get(ENV) or Path.home() / ".cache" / "vrh-lmms" / "heads-registry.json")


def checkpoint_key(pretrained: str) -> dict[str, str | None]:
    """How the registry names a checkpoint: its resolved folder or hub id, and its config.json's sha256."""
    path = Path(str(pretrained)).expanduser()
    if path.is_dir():
        config = path / "config.json"
        sha = hashlib.sha256(config.read_bytes()).hexdigest() if config.is_file() else None
        return {"checkpoint": str(path.resolve()), "config_sha256": sha}
    return {"checkpoint": str(pretrained).rstrip("/"), "config_sha256": None}


def _read(to_write: bool = False) -> list[dict[str, Any]]:
    """The entries; `to_write`: refuse a file that is not a registry we wrote (a run file's `env:` can point
    VRH_HEADS_REGISTRY at any file, and register would replace it)."""
    path = registry_path()
    if not path.is_file():
        if to_write and (path.exists() or path.is_symlink()):
            raise VRHError(f"heads registry {path} is not a file; set {ENV} to a file of its own")
        return []
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise VRHError(f"heads registry {path} is not valid JSON ({exc}); remove it or set {ENV}") from None
    ours = isinstance(data, dict) and str(data.get("schema", "")).startswith("vrh-heads-registry/")
    if to_write and not ours:
        raise VRHError(f"heads registry {path} is not a heads registry vrh-lmms wrote (no \"schema\": \"{SCHEMA}\"); "
                       f"left unchanged: set {ENV} to a file of its own")
    return list(data.get("entries", [])) if isinstance(data, dict) else []


def register(pretrained: str, tasks: list[str], heads_file: str | Path) -> Path:
    """Record that `heads_file` holds the heads discovery found for this checkpoint on these tasks."""
    # deferred: keeps the registry's readers (`heads=top20` in model args) free of filelock
    from filelock import FileLock, Timeout

    key = checkpoint_key(pretrained)
    task = ",".join(tasks)
    path = registry_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(f"{path}.lock", timeout=LOCK_TIMEOUT, thread_local=False):
            entries = [e for e in _read(to_write=True)
                       if not (e.get("checkpoint") == key["checkpoint"] and e.get("task") == task)]
            entries.append({**key, "task": task, "heads_file": str(Path(heads_file).resolve()),
                            "registered": time.strftime("%Y-%m-%dT%H:%M:%S")})
            return atomic.write_text(path, json.dumps({"schema": SCHEMA, "entries": entries}, indent=1))
    except Timeout:
        raise VRHError(f"heads registry {path} stayed locked for {LOCK_TIMEOUT:.0f} s ({path}.lock)") from None


def shipped(key: dict[str, str | None]) -> list[dict[str, Any]]:
    """The heads the package ships for a checkpoint, registered at install: the demo model's own heads file
    (found by `vrh-lmms discover` on vrh_demo_discovery), when `key` is the shipped demo model's folder."""
    folder = demo_folder()
    heads_file = folder / SHIPPED_HEADS
    if not heads_file.is_file() or key != checkpoint_key(str(folder)):
        return []
    return [{**key, "task": SHIPPED_TASK, "heads_file": str(heads_file), "shipped": True}]


def lookup(pretrained: str, task: str | None = None, evaluated: tuple[str, ...] = ()) -> Path:
    """The heads file registered for this checkpoint (and task); one clear error when there is none or several.

    Registrations by `vrh-lmms discover` come first, then the heads the package ships (`shipped`). When several
    tasks' heads are registered, those found on a task being `evaluated` win, then the shipped heads; otherwise
    one line lists the choices."""
    key = checkpoint_key(pretrained)
    mine = [e for e in _read() if e.get("checkpoint") == key["checkpoint"]]
    how = (f"run `vrh-lmms discover --model ... --model_args pretrained={pretrained} ...` first, or pass "
           f"heads_file=PATH")
    builtin = shipped(key)
    if not mine and not builtin:
        raise VRHError(f"no heads file is registered for {key['checkpoint']} ({registry_path()}); {how}")
    if mine and key["config_sha256"] is not None:
        same = [e for e in mine if e.get("config_sha256") == key["config_sha256"]]
        if not same and not builtin:
            raise VRHError(f"the heads registered for {key['checkpoint']} were found on another config.json (the "
                           f"checkpoint changed since); {how}")
        mine = same
    if task is not None:
        mine, builtin = [e for e in mine if e.get("task") == task], [e for e in builtin if e.get("task") == task]
        if not mine and not builtin:
            raise VRHError(f"no heads file is registered for {key['checkpoint']} on task {task!r}; {how}")
    mine = mine or builtin
    if len({e["task"] for e in mine}) > 1:
        wanted = set(evaluated)
        mine = [e for e in mine if wanted & set(e["task"].split(","))] or builtin or mine
    tasks = sorted({e["task"] for e in mine})
    if len(tasks) > 1:
        raise VRHError(f"heads of {key['checkpoint']} are registered for several tasks ({', '.join(tasks)}); choose "
                       f"one with heads_task=TASK, or pass heads_file=PATH")
    path = Path(mine[-1]["heads_file"])
    if not path.is_file():
        raise VRHError(f"the heads file registered for {key['checkpoint']} is gone ({path}); {how}")
    return path
