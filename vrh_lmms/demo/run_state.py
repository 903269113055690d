"""The demo trainer's resumable state: a run killed mid-phase continues bit-equal to the uninterrupted run.

Data are pure functions of (seed, phase, step), so besides the weights a run needs only its optimizer, the head
dropout generator, where it stood (phase, step), the lasso's reference norm, the head pruner's importance and
pruned set, and the figures logged so far. The state is written atomically next to the run's checkpoint at every
evaluation and removed when the run ends.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

RESUME_FILE = "resume_state.pt"


@dataclass
class RunState:
    phase: str  # the phase to continue
    step: int  # its next step
    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    drop_generator: torch.Tensor
    seconds: float  # wall time spent so far, so the log's clock continues
    history: list[dict[str, Any]] = field(default_factory=list)
    lasso_start: float | None = None
    prune: dict[str, Any] | None = None  # head_prune.HeadPruner.state(): importance and the pruned set


def resume_path(out_dir: str | Path) -> Path:
    return Path(out_dir) / RESUME_FILE


def save_state(out_dir: str | Path, state: RunState) -> Path:
    """Write to a temporary file, then rename: a kill while saving leaves the previous state intact."""
    path = resume_path(out_dir)
    tmp = path.with_suffix(".tmp")
    torch.save(state.__dict__, tmp)
    os.replace(tmp, path)
    return path


def load_state(out_dir: str | Path) -> RunState:
    path = resume_path(out_dir)
    if not path.is_file():
        raise FileNotFoundError(f"--resume: no unfinished run in {Path(out_dir)} (no {RESUME_FILE})")
    return RunState(**torch.load(path, weights_only=False))


def clear_state(out_dir: str | Path) -> None:
    resume_path(out_dir).unlink(missing_ok=True)
