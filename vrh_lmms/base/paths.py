"""Locations of installed package resources."""

from __future__ import annotations

import importlib.resources
import os
from pathlib import Path


def tasks_path() -> Path:
    """Folder of the plugin's lmms-eval tasks (`tasks/` in the repo, `vrh_lmms/tasks` when installed)."""
    return Path(str(importlib.resources.files("vrh_lmms.tasks")))


def assets_path() -> Path:
    return Path(str(importlib.resources.files("vrh_lmms") / "assets"))


def shown_path(path: str | Path, root: str | Path | None = None) -> str:
    """A local path as a report prints it, never absolute: relative to `root` (default: the working folder, where the
    run's paths were given) when inside it, `~/...` under the home folder, else relative to `root` with `..`."""
    path = Path(os.path.abspath(Path(path).expanduser()))
    root = Path(os.path.abspath(root if root is not None else Path.cwd()))
    if path.is_relative_to(root):
        return path.relative_to(root).as_posix() or "."
    home = Path(os.path.abspath(Path.home()))
    if path.is_relative_to(home):
        return "~/" + path.relative_to(home).as_posix()
    return Path(os.path.relpath(path, root)).as_posix()


def shown_model(model: str, root: str | Path | None = None) -> str:
    """A model as a report prints it: a local checkpoint (an absolute or `~` path) by `shown_path`, a hub id as it
    is."""
    text = str(model)
    return shown_path(text, root) if text.startswith(("/", "~")) else text
