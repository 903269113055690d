"""Tango's score interval for the difference of two paired proportions (Tango 1998, Statistics in Medicine 17).

The drop of an ablation on 0/1 outcomes is (lost - gained) / n, where `lost` counts samples right before and wrong
after. Tango inverts the score test of H0: drop = delta, with the nuisance probability at its restricted maximum
likelihood estimate; unlike a bootstrap it stays informative with few or no discordant pairs (0 of 100 discordant
gives about [-3.7, +3.7] points, the Wilson bound of 0/100), and it is among the intervals recommended for paired
proportions by Fagerland, Lydersen and Laake (2014, Statistics in Medicine 33). Counts may be fractional: dividing
all of them by a design effect gives the Rao-Scott-style clustered version used by `vrh_lmms.base.stats.drop`.
"""

from __future__ import annotations

import math

from scipy.optimize import brentq
from scipy.stats import norm

from vrh_lmms.base.stats.interval import ConfidenceInterval

_EDGE = 1e-12


def tango_statistic(lost: float, gained: float, n: float, delta: float) -> float:
    """Score statistic of H0: drop = delta; standard normal under H0, decreasing in delta."""
    a = 2.0 * n
    b = -lost - gained + (2.0 * n - lost + gained) * delta
    c = -gained * delta * (1.0 - delta)
    p_gained = (math.sqrt(max(b * b - 4.0 * a * c, 0.0)) - b) / (2.0 * a)
    var = n * (2.0 * p_gained + delta * (1.0 - delta))
    diff = lost - gained - n * delta
    if var <= 0.0:
        return 0.0 if diff == 0.0 else math.copysign(math.inf, diff)
    return diff / math.sqrt(var)


def tango_interval(lost: float, gained: float, n: float, alpha: float = 0.05) -> ConfidenceInterval:
    """(1 - alpha) score interval for (lost - gained) / n; `lost`, `gained` and `n` may be fractional (n > 0)."""
    if n <= 0 or lost < 0 or gained < 0 or lost + gained > n * (1 + 1e-12):
        raise ValueError(f"need 0 <= lost, gained and lost + gained <= n, got lost={lost}, gained={gained}, n={n}")
    z = float(norm.ppf(1.0 - alpha / 2.0))
    estimate = (lost - gained) / n
    lo_edge, hi_edge = -1.0 + _EDGE, 1.0 - _EDGE
    if estimate <= lo_edge:
        low = -1.0
    else:
        low = brentq(lambda d: tango_statistic(lost, gained, n, d) - z, lo_edge, min(estimate, hi_edge), xtol=1e-12)
    if estimate >= hi_edge:
        high = 1.0
    else:
        high = brentq(lambda d: tango_statistic(lost, gained, n, d) + z, max(estimate, lo_edge), hi_edge, xtol=1e-12)
    return ConfidenceInterval(float(low), float(high))
