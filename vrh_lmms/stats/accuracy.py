"""Accuracy of one run with a confidence interval and standard error.

Binary outcomes get a Wilson interval (statsmodels), which keeps its coverage near 0 and 1 where the Wald interval
fails (ablated accuracies are often close to 0). Non-binary scores (e.g. `--score-field iou`) get a t interval.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as sps
from statsmodels.stats.proportion import proportion_confint


@dataclass(frozen=True)
class AccuracyResult:
    """Mean outcome of n samples; `method` names how the CI was made ("wilson" or "t")."""

    n: int
    mean: float
    se: float
    ci_low: float
    ci_high: float
    method: str
    n_correct: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def is_binary(values: ArrayLike) -> bool:
    """True when every value is 0 or 1 (booleans included)."""
    arr = np.asarray(values, dtype=float)
    return bool(np.all((arr == 0.0) | (arr == 1.0)))


def accuracy(values: ArrayLike, alpha: float = 0.05) -> AccuracyResult:
    """Mean with a (1 - alpha) CI: Wilson for 0/1 outcomes, Student t otherwise.

    `se` is the plug-in standard error sqrt(p(1-p)/n) for binary outcomes (what lmms-eval reports) and
    sd/sqrt(n) with ddof=1 otherwise.
    """
    arr = np.asarray(values, dtype=float).ravel()
    n = int(arr.size)
    if n == 0:
        raise ValueError("accuracy of zero samples is undefined")
    if not np.all(np.isfinite(arr)):
        raise ValueError("accuracy needs finite per-sample values")
    mean = float(arr.mean())
    if is_binary(arr):
        k = int(arr.sum())
        low, high = proportion_confint(k, n, alpha=alpha, method="wilson")
        se = math.sqrt(mean * (1.0 - mean) / n)
        return AccuracyResult(n, mean, se, float(low), float(high), "wilson", k)
    if n == 1:
        return AccuracyResult(n, mean, float("nan"), float("nan"), float("nan"), "t")
    se = float(arr.std(ddof=1) / math.sqrt(n))
    if se == 0.0:
        return AccuracyResult(n, mean, 0.0, mean, mean, "t")
    low, high = sps.t.interval(1.0 - alpha, df=n - 1, loc=mean, scale=se)
    return AccuracyResult(n, mean, se, float(low), float(high), "t")
