"""Paired cluster bootstrap of an accuracy drop: whole images (with all their samples) are resampled.

Several referring expressions share one image and their outcomes are correlated; resampling samples as if they were
independent makes the CI too narrow. The statistic is the pooled mean difference over the resampled samples (a ratio
estimator), so images with more samples weigh more, exactly as in the point estimate. The interval is BCa by default
(scipy.stats.bootstrap, jackknife over images), which corrects the percentile interval's bias and skew; "percentile"
is available. A bootstrap cannot say anything when no image has a non-zero difference (every resample is the
same): the result is then marked `degenerate`, and `vrh_lmms.base.stats.drop` relies on the score interval instead.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import bootstrap

from vrh_lmms.base.stats.clusters import cluster_totals
from vrh_lmms.base.stats.interval import HasInterval

# Cells (resamples x clusters) per vectorised batch: bounds scipy's resample matrices to ~16 MB each.
_BATCH_CELLS = 2_000_000
METHODS = {"bca": "BCa", "percentile": "percentile"}


@dataclass(frozen=True)
class BootstrapResult(HasInterval):
    """Drop = mean(baseline) - mean(ablated) with a bootstrap CI over clusters (samples if `clustered` is False)."""

    drop: float
    ci_low: float
    ci_high: float
    se: float
    method: str
    n_pairs: int
    n_clusters: int
    n_resamples: int
    clustered: bool
    degenerate: bool
    seed: int

    def to_dict(self) -> dict:
        return asdict(self)


def _pooled_mean(sums: np.ndarray, counts: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.sum(sums, axis=axis) / np.sum(counts, axis=axis)


def paired_bootstrap_drop(
    baseline: ArrayLike,
    ablated: ArrayLike,
    clusters: ArrayLike | None = None,
    *,
    n_resamples: int = 10_000,
    alpha: float = 0.05,
    seed: int = 0,
    method: str = "bca",
) -> BootstrapResult:
    """Drop of ablated vs baseline on the same samples, with a (1 - alpha) cluster bootstrap CI.

    `baseline[i]` and `ablated[i]` must be outcomes of the same sample; `clusters[i]` its image id. Pass
    `clusters=None` for the naive (per-sample) bootstrap.
    """
    if method not in METHODS:
        raise ValueError(f"unknown bootstrap interval {method!r}; use one of {sorted(METHODS)}")
    b = np.asarray(baseline, dtype=float).ravel()
    a = np.asarray(ablated, dtype=float).ravel()
    if b.size != a.size:
        raise ValueError(f"paired arrays differ in length: {b.size} baseline vs {a.size} ablated")
    if b.size == 0:
        raise ValueError("bootstrap of zero pairs is undefined")
    if n_resamples < 1:
        raise ValueError("n_resamples must be >= 1")
    diffs = b - a
    sums, counts = cluster_totals(diffs, clusters)
    drop = float(diffs.mean())
    means = sums / counts
    common = dict(drop=drop, method=method, n_pairs=int(diffs.size), n_clusters=int(sums.size),
                  n_resamples=int(n_resamples), clustered=clusters is not None, seed=int(seed))
    if sums.size < 2 or np.all(means == means[0]):
        return BootstrapResult(ci_low=drop, ci_high=drop, se=0.0, degenerate=True, **common)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns about BCa on near-degenerate data; we check the result
        res = bootstrap((sums, counts), _pooled_mean, paired=True, vectorized=True, method=METHODS[method],
                        n_resamples=n_resamples, confidence_level=1.0 - alpha, random_state=np.random.default_rng(seed),
                        batch=max(1, _BATCH_CELLS // sums.size))
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    degenerate = not (np.isfinite(low) and np.isfinite(high))
    if degenerate:
        low = high = drop
    return BootstrapResult(ci_low=low, ci_high=high, se=float(res.standard_error), degenerate=degenerate, **common)
