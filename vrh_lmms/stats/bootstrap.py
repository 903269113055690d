"""Paired bootstrap of an accuracy drop, resampling whole images (clusters) with all their samples.

Several referring expressions share one image and their outcomes are correlated; resampling samples as if they were
independent makes the CI too narrow (tests/test_stats_bootstrap.py shows the under-coverage). Resampling images keeps
that correlation. The statistic is the pooled mean over the resampled samples (a ratio estimator), so images with more
samples weigh more, exactly as in the point estimate.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike

# Cells (resamples x clusters) per vectorised block: bounds the index and gathered matrices to ~16 MB each.
_BLOCK_CELLS = 2_000_000


@dataclass(frozen=True)
class DropResult:
    """Drop = mean(baseline) - mean(ablated) on paired samples, with a percentile bootstrap CI."""

    drop: float
    ci_low: float
    ci_high: float
    se: float
    n_pairs: int
    n_clusters: int
    n_resamples: int
    clustered: bool
    seed: int

    def to_dict(self) -> dict:
        return asdict(self)


def _cluster_sums(diffs: np.ndarray, clusters: ArrayLike | None) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster sum of differences and per-cluster sample count (each sample is its own cluster if None)."""
    if clusters is None:
        return diffs.astype(float), np.ones(diffs.size, dtype=float)
    labels = np.asarray(clusters)
    if labels.shape[0] != diffs.size:
        raise ValueError(f"clusters has {labels.shape[0]} labels for {diffs.size} pairs")
    _, inverse = np.unique(labels, return_inverse=True)
    sums = np.bincount(inverse, weights=diffs)
    counts = np.bincount(inverse).astype(float)
    return sums, counts


def bootstrap_mean_diffs(
    diffs: ArrayLike, clusters: ArrayLike | None = None, n_resamples: int = 10_000, seed: int = 0
) -> np.ndarray:
    """Bootstrap distribution of the pooled mean of `diffs`, resampling clusters with replacement.

    Returns an array of `n_resamples` resampled means. Vectorised in blocks; one seeded generator, so the same seed
    gives the same draws.
    """
    d = np.asarray(diffs, dtype=float).ravel()
    if d.size == 0:
        raise ValueError("bootstrap of zero pairs is undefined")
    if n_resamples < 1:
        raise ValueError("n_resamples must be >= 1")
    sums, counts = _cluster_sums(d, clusters)
    g = sums.size
    rng = np.random.default_rng(seed)
    out = np.empty(n_resamples, dtype=float)
    index_type = np.int32 if g < 2**31 else np.int64
    block = max(1, _BLOCK_CELLS // g)
    for start in range(0, n_resamples, block):
        stop = min(start + block, n_resamples)
        idx = rng.integers(0, g, size=(stop - start, g), dtype=index_type)
        out[start:stop] = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
    return out


def paired_bootstrap_drop(
    baseline: ArrayLike,
    ablated: ArrayLike,
    clusters: ArrayLike | None = None,
    *,
    n_resamples: int = 10_000,
    alpha: float = 0.05,
    seed: int = 0,
) -> DropResult:
    """Drop of ablated vs baseline on the same samples, with a (1 - alpha) percentile CI.

    `baseline[i]` and `ablated[i]` must be outcomes of the same sample; `clusters[i]` its image id. Pass
    `clusters=None` for the naive (per-sample) bootstrap.
    """
    b = np.asarray(baseline, dtype=float).ravel()
    a = np.asarray(ablated, dtype=float).ravel()
    if b.size != a.size:
        raise ValueError(f"paired arrays differ in length: {b.size} baseline vs {a.size} ablated")
    diffs = b - a
    boot = bootstrap_mean_diffs(diffs, clusters, n_resamples=n_resamples, seed=seed)
    low, high = np.quantile(boot, [alpha / 2.0, 1.0 - alpha / 2.0])
    n_clusters = diffs.size if clusters is None else int(np.unique(np.asarray(clusters)).size)
    return DropResult(
        drop=float(diffs.mean()),
        ci_low=float(low),
        ci_high=float(high),
        se=float(boot.std(ddof=1)) if boot.size > 1 else float("nan"),
        n_pairs=int(diffs.size),
        n_clusters=n_clusters,
        n_resamples=int(n_resamples),
        clustered=clusters is not None,
        seed=int(seed),
    )
