"""The demo trainer's resumable state: a run killed mid-phase continues bit-equal to the uninterrupted run.

Data are pure functions of (seed, phase, step), so besides the weights a run needs only its optimizer, the head
dropout generator, where it stood (phase, step), the head pruner's importance and pruned set, the state of the
design's phase hooks (`train.PhaseHook`, e.g. a research lasso's reference norm) and the figures logged so far. The
state is written atomically next to the run's checkpoint at every evaluation and removed when the run ends.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vrh_lmms.base.errors import VRHError

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
    hooks: list[dict[str, Any]] | None = None  # each of Design.phase_hooks' state(), in order
    prune: dict[str, Any] | None = None  # head_prune.HeadPruner.state(): importance and the pruned set
    prune_extra: list[dict[str, Any]] | None = None  # the same for each of Design.head_prune_extra's groups


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
    try:  # tensors, dicts, lists, numbers and strings only: a state that needs any other class could run code
        data = torch.load(path, weights_only=True)
    except pickle.UnpicklingError as exc:
        # torch's message is a page that suggests weights_only=False; keep its one line naming what was asked for
        reason = next((line.strip() for line in str(exc).splitlines() if "GLOBAL" in line or "nsupported" in line),
                      "it asks for classes beyond plain data")
        raise VRHError(f"--resume: {path} holds more than plain tensors and data, refused ({reason}); restart "
                       f"without --resume (or remove {RESUME_FILE})") from None
    if "lasso_start" in data:  # a state saved before the lasso left the trainer for research/head_lasso.py
        start = data.pop("lasso_start")
        data.setdefault("hooks", None if start is None else [{"lasso_start": start}])
    return RunState(**data)


def parse_keep_states(points, phase_steps: dict[str, int], eval_every: int) -> set[tuple[str, int]]:
    """"PHASE:STEP" -> (phase, step); refuses a phase the run lacks or a step that is no evaluation point of it (no
    state is saved there), naming the bad entry."""
    out = set()
    for point in points:
        name, _, step = str(point).strip().partition(":")
        if name not in phase_steps or not step.strip().isdigit():
            raise ValueError(f"keep state {point!r}: expected PHASE:STEP with PHASE one of "
                             f"{', '.join(phase_steps)}")
        n = int(step)
        if not 0 < n <= phase_steps[name] or (n % eval_every and n != phase_steps[name]):
            raise ValueError(f"keep state {point!r}: states are saved at every {eval_every} steps of a phase and at "
                             f"its end ({name}: {phase_steps[name]} steps)")
        out.add((name, n))
    return out


def kept_path(out_dir: str | Path, phase: str, step: int) -> Path:
    return Path(out_dir) / f"resume_state_{phase}_{step}.pt"


def keep_state(out_dir: str | Path, phase: str, step: int) -> Path:
    """Copy the state just saved (atomically, as save_state does) to its kept name; clear_state leaves it."""
    import shutil

    dest = kept_path(out_dir, phase, step)
    tmp = dest.with_suffix(".tmp")
    shutil.copyfile(resume_path(out_dir), tmp)
    os.replace(tmp, dest)
    return dest


def clear_state(out_dir: str | Path) -> None:
    resume_path(out_dir).unlink(missing_ok=True)
