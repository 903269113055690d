"""Locations of installed package resources."""

from __future__ import annotations

import importlib.resources
from pathlib import Path


def tasks_path() -> Path:
    """Folder of the plugin's lmms-eval tasks (`tasks/` in the repo, `vrh_lmms/tasks` when installed)."""
    return Path(str(importlib.resources.files("vrh_lmms.tasks")))


def assets_path() -> Path:
    return Path(str(importlib.resources.files("vrh_lmms") / "assets"))
