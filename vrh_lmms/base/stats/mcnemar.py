"""Exact McNemar test of paired binary outcomes (baseline vs ablated on the same samples).

Only discordant pairs carry information; with few of them the chi-square approximation is poor, so the exact
binomial version (statsmodels `mcnemar(exact=True)`) is used always.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import binomtest
from statsmodels.stats.contingency_tables import mcnemar

from vrh_lmms.base.stats.accuracy import is_binary
from vrh_lmms.base.stats.interval import check_alternative


@dataclass(frozen=True)
class McNemarResult:
    """`lost` = baseline right and ablated wrong; `gained` = baseline wrong and ablated right."""

    n_pairs: int
    both_correct: int
    lost: int
    gained: int
    both_wrong: int
    pvalue: float
    alternative: str = "two-sided"

    def to_dict(self) -> dict:
        return asdict(self)


def exact_mcnemar(baseline: ArrayLike, ablated: ArrayLike, alternative: str = "two-sided") -> McNemarResult:
    """Exact McNemar p-value for paired 0/1 outcomes: two-sided (statsmodels), or one-sided as scipy's binomtest of
    `lost` among the discordant pairs ("greater": the ablation loses more than it gains)."""
    check_alternative(alternative)
    b = np.asarray(baseline, dtype=float).ravel()
    a = np.asarray(ablated, dtype=float).ravel()
    if b.size != a.size:
        raise ValueError(f"paired arrays differ in length: {b.size} baseline vs {a.size} ablated")
    if not (is_binary(b) and is_binary(a)):
        raise ValueError("McNemar needs 0/1 outcomes")
    bb, ab = b.astype(bool), a.astype(bool)
    table = np.array(
        [[int(np.sum(bb & ab)), int(np.sum(bb & ~ab))], [int(np.sum(~bb & ab)), int(np.sum(~bb & ~ab))]]
    )
    lost, gained = int(table[0, 1]), int(table[1, 0])
    # statsmodels returns p = min(1, 2 * binom.cdf(min(b, c), b + c, 0.5)); with no discordant pairs that is 1.
    if lost + gained == 0:
        pvalue = 1.0
    elif alternative == "two-sided":
        pvalue = float(mcnemar(table, exact=True).pvalue)
    else:
        pvalue = float(binomtest(lost, lost + gained, 0.5, alternative=alternative).pvalue)
    return McNemarResult(int(b.size), int(table[0, 0]), lost, gained, int(table[1, 1]), pvalue, alternative)
