"""Checks and identities every run draws from (sweep, steering, patching, discovery, the one-result commands): the
sha256 of a file a run reads, the synthetic scenes its synthetic tasks evaluate, and the dead heads of a heads file or
a loaded model (heads that write nothing: a control never draws them)."""

from __future__ import annotations

import hashlib
from dataclasses import asdict
from pathlib import Path
from typing import Any

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import parse_head
from vrh_lmms.tasks.common.grounding_data import SYNTH_CONFIG_ENV, synth_spec

SYNTH_TASKS = ("vrh_synth_grounding", "vrh_synth_grounding_refer")


def sha256_of(path: str | None) -> str | None:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else None


def data_identity(tasks: list[str]) -> dict[str, Any]:
    """The synthetic scenes a sweep's synthetic tasks evaluate (VRH_SYNTH_CONFIG or defaults): part of what must
    match to resume, and what `vrh-lmms dpo-pairs` regenerates the images from."""
    if not any(t in SYNTH_TASKS for t in tasks):
        return {}

    try:
        return {"synth": asdict(synth_spec({}, SYNTH_CONFIG_ENV))}
    except ValueError as exc:
        raise VRHError(str(exc)) from None


def recorded_dead_heads(heads_file) -> tuple:
    """The dead heads a heads file recorded at discovery (the model's own are read again once it loads)."""
    names = (heads_file.extra.get("dead_heads") or {}).get("heads") if heads_file is not None else None
    return tuple(parse_head(n) for n in names) if isinstance(names, list) else ()


def dead_heads_of(lm, heads_file=None) -> tuple:
    """The heads that write nothing: the loaded model's own (read from its weights at load), else, before it
    loads, what the heads file recorded; () where neither knows."""
    if lm is None:
        return recorded_dead_heads(heads_file)
    return tuple(getattr(lm, "vrh_dead_heads", None) or ())


def dead_head_names(lm) -> list[str] | None:
    """The loaded model's dead heads as names for the files a run writes; None where the weights were unreadable."""
    dead = getattr(lm, "vrh_dead_heads", None)
    return None if dead is None else [str(h) for h in dead]
