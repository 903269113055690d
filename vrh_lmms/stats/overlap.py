"""Overlap of head sets: Jaccard index of the top-k heads of two rankings (e.g. two models' heads files)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np


def jaccard(a: Iterable[str], b: Iterable[str]) -> float:
    """|A & B| / |A | B|; two empty sets count as identical (1.0)."""
    sa, sb = set(a), set(b)
    union = sa | sb
    return 1.0 if not union else len(sa & sb) / len(union)


def topk_jaccard_matrix(rankings: Sequence[Sequence[str]], k: int) -> np.ndarray:
    """Symmetric matrix of Jaccard indices between the first k heads of each ranking."""
    if k < 1:
        raise ValueError("k must be >= 1")
    tops = [list(r)[:k] for r in rankings]
    n = len(tops)
    out = np.eye(n)
    for i in range(n):
        for j in range(i + 1, n):
            out[i, j] = out[j, i] = jaccard(tops[i], tops[j])
    return out
