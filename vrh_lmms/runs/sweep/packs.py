"""A sweep's packs: configurations evaluated side by side as rows of one batch (vrh_lmms.model.packing), grouped
here; a configuration whose ablation a pack cannot carry runs alone."""

from __future__ import annotations

from collections.abc import Sequence

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.plan import UNIFORM_MODES, Configuration


def unpackable_reason(cfg: Configuration) -> str | None:
    """Why a configuration must run alone rather than in a pack (None: it can share one)."""
    if cfg.mode in UNIFORM_MODES:
        return (f"ablation {cfg.mode} replaces answer-row attention, which a pack's per-row o_proj masks cannot "
                "carry")
    return None


def _even_groups(configs: Sequence[Configuration], size: int) -> list[list[Configuration]]:
    if not configs:
        return []
    n_groups = -(-len(configs) // size)
    base, extra = divmod(len(configs), n_groups)
    groups, start = [], 0
    for g in range(n_groups):
        end = start + base + (1 if g < extra else 0)
        groups.append(list(configs[start:end]))
        start = end
    return groups


def pack_groups(configs: Sequence[Configuration], size: int) -> list[list[Configuration]]:
    """Consecutive groups of at most `size` configurations, as even as possible (22 by 16 -> 11 + 11); a
    configuration that cannot be packed (`unpackable_reason`) is a group of its own, in its place."""
    if size < 1:
        raise VRHError(f"--pack must be >= 1, got {size}")
    groups: list[list[Configuration]] = []
    run: list[Configuration] = []
    for cfg in configs:
        if unpackable_reason(cfg) is None:
            run.append(cfg)
            continue
        groups += _even_groups(run, size) + [[cfg]]
        run = []
    return groups + _even_groups(run, size)


def parse_pack(text: str | int | None) -> int | None:
    """`--pack`: a positive integer, or `auto` (None)."""
    if text is None or str(text).strip().lower() == "auto":
        return None
    try:
        value = int(str(text))
    except ValueError:
        raise VRHError(f"--pack {text!r}: expected a positive integer or auto") from None
    if value < 1:
        raise VRHError(f"--pack {text!r}: expected a positive integer or auto")
    return value
