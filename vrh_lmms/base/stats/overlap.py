"""Overlap of head sets and agreement of score maps (e.g. two models' heads files): Jaccard index of top-k heads, the
top-k overlap against its hypergeometric chance level, and Spearman's correlation over all heads."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import hypergeom, spearmanr


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


@dataclass(frozen=True)
class TopkOverlap:
    """How many of two top-k head sets coincide, against drawing B's k heads at random from the population.

    `chance` is the expected overlap k_a * k_b / N; `p_value` is the hypergeometric tail P(X >= overlap): the chance
    that k_b heads drawn without replacement from N, of which k_a are A's, hold at least `overlap` of A's."""

    overlap: int
    k_a: int
    k_b: int
    population: int
    chance: float
    p_value: float
    jaccard: float


def hypergeom_tail(overlap: int, population: int, k_a: int, k_b: int) -> float:
    """P(X >= overlap) for X ~ Hypergeometric(N = population, K = k_a successes, n = k_b draws)."""
    if not 0 <= k_a <= population or not 0 <= k_b <= population:
        raise ValueError(f"top-k sizes {k_a}, {k_b} must lie between 0 and the population {population}")
    if overlap <= 0:
        return 1.0
    return float(hypergeom.sf(overlap - 1, population, k_a, k_b))


def topk_overlap(a: Sequence[str], b: Sequence[str], population: int) -> TopkOverlap:
    """Overlap of two head sets (each a model's top-k) drawn from `population` heads, with chance level and tail p."""
    sa, sb = set(a), set(b)
    if len(sa) != len(a) or len(sb) != len(b):
        raise ValueError("a top-k head set lists a head twice")
    if len(sa) > population or len(sb) > population:
        raise ValueError(f"a top-k set is larger than the population of {population} heads")
    shared = len(sa & sb)
    return TopkOverlap(overlap=shared, k_a=len(sa), k_b=len(sb), population=population,
                       chance=len(sa) * len(sb) / population, p_value=hypergeom_tail(shared, population, len(sa),
                                                                                     len(sb)),
                       jaccard=jaccard(sa, sb))


def score_spearman(a: np.ndarray, b: np.ndarray, mask: np.ndarray | None = None) -> float:
    """Spearman's rank correlation of two score maps of one geometry over every head (or the heads in `mask`);
    NaN when either map is constant there (no ranking to correlate)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"score maps differ in shape: {a.shape} vs {b.shape}")
    keep = np.ones(a.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    x, y = a[keep].ravel(), b[keep].ravel()
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(spearmanr(x, y).statistic)
