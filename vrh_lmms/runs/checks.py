"""Checks and identities every run draws from (sweep, steering, patching, discovery, the one-result commands): the
sha256 of a file a run reads, the synthetic scenes its synthetic tasks evaluate, and the dead heads of a heads file or
a loaded model (heads that write nothing: a control never draws them)."""

from __future__ import annotations

import hashlib
from dataclasses import asdict
from pathlib import Path
from typing import Any

from vrh_lmms.base.data_env import data_env
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import parse_head
from vrh_lmms.tasks.common.grounding_data import SYNTH_CONFIG_ENV, synth_spec
from vrh_lmms.tasks.common.task_sources import chosen_sources, source_record

SYNTH_TASKS = ("vrh_synth_grounding", "vrh_synth_grounding_refer")


def sha256_of(path: str | None) -> str | None:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else None


def data_identity(tasks: list[str]) -> dict[str, Any]:
    """The data a run's tasks evaluate, as resolved before any row loads: the synthetic scenes of its synthetic tasks
    (VRH_SYNTH_CONFIG or defaults; what `vrh-lmms dpo-pairs` regenerates the images from) where they are generated,
    `sources` where a variable chose another source than a task's default (local files, a refer root, another hub
    id), and `data`, every data-choosing variable set (vrh_lmms.base.data_env). What must match to resume."""
    try:
        chosen = chosen_sources(tasks)
        generated = [t for t in tasks if t in SYNTH_TASKS and (t not in chosen or chosen[t].kind == "synth")]
        out: dict[str, Any] = {"synth": asdict(synth_spec({}, SYNTH_CONFIG_ENV))} if generated else {}
    except ValueError as exc:
        raise VRHError(str(exc)) from None
    out |= {"sources": {t: source_record(s) for t, s in chosen.items()}} if chosen else {}
    # the synthetic scenes, where recorded above, stand for VRH_SYNTH_CONFIG
    data = data_env(skip=("VRH_SYNTH_CONFIG",) if "synth" in out else ())
    return out | ({"data": data} if data else {})


def chosen_data(tasks: list[str]) -> dict[str, Any]:
    """What a run's answers depend on in its data, for identities that never held the synthetic scenes (steering,
    patching): the sources variables chose and every data-choosing variable set; empty on the default data."""
    sources = chosen_sources(tasks)
    return ({"sources": {t: source_record(s) for t, s in sources.items()}} if sources else {}) \
        | ({"data": data} if (data := data_env()) else {})


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
