"""Checks on the numbers of a heads file: a score grid of finite numbers and a ranking that agrees with it.

A NaN, null or infinite score, a string where a number belongs, or a ranking that puts a lower-scored head first
would otherwise flow into top-k sets, overlaps and p values as silent wrong numbers; each is refused in one line
naming the file and the field."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import HeadRef

# Scores are written rounded to 8 decimals (HeadsFile.to_json) from the unrounded values the ranking was made from;
# rounding keeps their order but may tie them, so a tie in either direction is no disagreement.
_ROUNDING = 1e-8


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def score_grid(value: Any, shape: tuple[int, int], where: str) -> np.ndarray:
    """`value` as a (layers, heads) float array of finite numbers; the first bad entry named otherwise."""
    layers, heads = shape
    if not isinstance(value, list) or not all(isinstance(row, list) for row in value):
        raise VRHError(f"{where} must be a list of {layers} lists of {heads} numbers, got {type(value).__name__}"
                       + ("" if not isinstance(value, list) else " items"))
    if len(value) != layers or any(len(row) != heads for row in value):
        widths = sorted({len(row) for row in value})
        found = f"({len(value)}, {widths[0] if len(widths) == 1 else ' or '.join(map(str, widths)) or 0})"
        raise VRHError(f"{where} has shape {found}, but geometry says {layers} layers x {heads} heads")
    for layer, row in enumerate(value):
        for head, item in enumerate(row):
            if not _number(item) or not math.isfinite(item):
                raise VRHError(f"{where} of L{layer}H{head} is {item!r}: every score must be a finite number")
    return np.asarray(value, dtype=float)


def ranking_agrees(scores: np.ndarray, ranking: Sequence[HeadRef], where: str) -> None:
    """Every ranked head scores at least as much as each head ranked after it.

    One exception keeps old files loading: `vrh-lmms discover` wrote a head whose score was undefined (NaN) as 0 and
    ranked it last, below heads with negative (null-query corrected) scores; a tail of heads scoring exactly 0 after
    the others is therefore accepted."""
    values = [float(scores[h.layer, h.head]) for h in ranking]
    tail = len(values)
    while tail > 0 and values[tail - 1] == 0.0:
        tail -= 1
    lowest_so_far = math.inf
    for i, value in enumerate(values[:tail]):
        if value > lowest_so_far + _ROUNDING:
            previous = next(j for j in range(i) if values[j] == lowest_so_far)
            raise VRHError(f"{where}: item {i} ({ranking[i]}, score {value:.6g}) is ranked below item {previous} "
                           f"({ranking[previous]}, score {lowest_so_far:.6g}); the ranking must list heads by "
                           f"decreasing score")
        lowest_so_far = min(lowest_so_far, value)
