"""Accuracy of one run with a confidence interval that accounts for image clusters.

Binary outcomes get a Wilson interval (statsmodels) on the effective sample size n / deff, where the design effect
deff (vrh_lmms.base.stats.clusters) compares the cluster-robust variance of the pooled accuracy with the binomial one.
This is the Korn-Graubard construction: Wilson keeps its coverage near 0 and 1, where ablated accuracies live, and the
design effect restores it when the expressions of an image succeed or fail together (a plain Wilson interval covers
75-79% instead of 95% on RefCOCO-like clustering; tests/acceptance/test_stats_coverage.py). Too few informative images
to estimate deff (e.g. an accuracy of 0 or 1) take the worst case, every image's expressions alike.

The caller says what it measures (`quantity`), and the interval follows the quantity, never the values that happened
to occur: a continuous ratio whose every value is exactly 0 is still a ratio, not 0/1 outcomes, and gets no binomial
interval.
- "binary": 0/1 outcomes (correct or not, moved or not): the Wilson interval above.
- "bounded": scores in [0, 1] (IoU): a t interval with the cluster-robust standard error and G - 1 degrees of
  freedom, clipped to [0, 1].
- "unbounded": any real value (patching recoveries, logit differences): the same t interval, unclipped.
A degenerate sample (every value equal) is flagged: its t interval has zero width, which says only that no spread was
seen, not that the mean is known exactly; a binary one keeps its Wilson interval (the binomial bound of k of n).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike
from statsmodels.stats.proportion import proportion_confint

from vrh_lmms.base.stats.clusters import cluster_t_interval, cluster_totals, design_effect
from vrh_lmms.base.stats.interval import HasInterval


@dataclass(frozen=True)
class AccuracyResult(HasInterval):
    """Mean outcome of n samples; `method` names how the CI was made ("wilson" or "t"); `deff` the design effect
    used (1 without clusters), `deff_method` how it was obtained, `n_eff` = n / deff."""

    n: int
    mean: float
    se: float
    ci_low: float
    ci_high: float
    method: str
    n_correct: int | None = None
    n_clusters: int | None = None
    deff: float = 1.0
    deff_method: str = "none"
    n_eff: float | None = None
    quantity: str = "binary"
    degenerate: bool = False  # every value equal: a t interval has zero width (no spread seen)

    def to_dict(self) -> dict:
        return asdict(self)


QUANTITIES = ("binary", "bounded", "unbounded")


def is_binary(values: ArrayLike) -> bool:
    """True when every value is 0 or 1 (booleans included)."""
    arr = np.asarray(values, dtype=float)
    return bool(np.all((arr == 0.0) | (arr == 1.0)))


def _binary(arr: np.ndarray, clusters: ArrayLike | None, alpha: float) -> AccuracyResult:
    n = arr.size
    k = int(arr.sum())
    mean = k / n
    sums, counts = cluster_totals(arr, clusters)
    minority = (counts - sums) if mean >= 0.5 else sums  # per-image count of the rarer outcome
    deff = design_effect(sums, counts, mean * (1.0 - mean) / n, int(np.sum(minority > 0)))
    n_eff = n / deff.deff
    count, nobs = (k, n) if deff.deff == 1.0 else (mean * n_eff, n_eff)
    low, high = proportion_confint(count, nobs, alpha=alpha, method="wilson")
    se = math.sqrt(mean * (1.0 - mean) / n_eff)
    return AccuracyResult(n, mean, se, float(max(0.0, low)), float(min(1.0, high)), "wilson", k, int(sums.size),
                          deff.deff, deff.method, n_eff, "binary", _all_equal(arr))


def _all_equal(arr: np.ndarray) -> bool:
    return bool(arr.size > 0 and np.all(arr == arr[0]))


def _numeric(arr: np.ndarray, clusters: ArrayLike | None, alpha: float, quantity: str) -> AccuracyResult:
    mean, se, low, high, df = cluster_t_interval(arr, clusters, alpha)
    degenerate = _all_equal(arr)
    if degenerate:  # no spread seen: a zero-width interval at the common value, flagged (df may be 0 here)
        se, low, high = 0.0, mean, mean
    if quantity == "bounded" and np.isfinite(low):
        low, high = max(0.0, low), min(1.0, high)
    method = "t (degenerate: every value equal)" if degenerate else "t"
    return AccuracyResult(arr.size, mean, se, low, high, method, None, df + 1 if clusters is not None else None,
                          quantity=quantity, degenerate=degenerate)


def accuracy(values: ArrayLike, clusters: ArrayLike | None = None, alpha: float = 0.05, *,
             quantity: str) -> AccuracyResult:
    """Mean with a (1 - alpha) CI chosen by `quantity` (QUANTITIES; module docstring): design-effect-adjusted
    Wilson for "binary" outcomes, a cluster-robust t interval for "bounded" and "unbounded" scores.

    `clusters[i]` is the image of sample i; None treats every sample as its own image (plain Wilson / t).
    """
    if quantity not in QUANTITIES:
        raise ValueError(f"quantity {quantity!r}: use one of {', '.join(QUANTITIES)}")
    arr = np.asarray(values, dtype=float).ravel()
    if arr.size == 0:
        raise ValueError("accuracy of zero samples is undefined")
    if not np.all(np.isfinite(arr)):
        raise ValueError("accuracy needs finite per-sample values")
    if quantity == "binary":
        if not is_binary(arr):
            bad = arr[(arr != 0.0) & (arr != 1.0)][0]
            raise ValueError(f"quantity 'binary' needs 0/1 outcomes, got {bad:g}")
        return _binary(arr, clusters, alpha)
    if quantity == "bounded" and (arr.min() < 0.0 or arr.max() > 1.0):
        bad = arr[(arr < 0.0) | (arr > 1.0)][0]
        raise ValueError(f"quantity 'bounded' needs scores in [0, 1], got {bad:g}")
    return _numeric(arr, clusters, alpha, quantity)


def cluster_ci(values: np.ndarray, clusters: np.ndarray, quantity: str,
               alpha: float = 0.05) -> tuple[float | None, float | None]:
    """(1 - alpha) CI of the pooled mean with images as clusters (`accuracy`), chosen by what the values are
    (`quantity`: "binary" for moved-or-not, "unbounded" for recoveries); None where it is undefined (a numeric mean
    over a single image)."""
    result = accuracy(values, clusters, alpha, quantity=quantity)
    if not (np.isfinite(result.ci_low) and np.isfinite(result.ci_high)):
        return None, None
    return float(result.ci_low), float(result.ci_high)
