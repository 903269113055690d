"""Image clusters: per-image totals, the cluster-robust variance of a pooled mean, and the design effect.

Referring-expression benchmarks hold several expressions per image and an ablation tends to flip an image's
expressions together, so samples are not independent; the image is the unit of independence. Every interval and test
in `vrh_lmms.base.stats` that accounts for clustering goes through these helpers.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as sps

# Below this many informative images (images where the outcome varies from the majority, or where a paired
# difference is non-zero) a design effect estimated from the data is too noisy to trust; the worst case is used.
MIN_INFORMATIVE_CLUSTERS = 10


def cluster_totals(values: ArrayLike, clusters: ArrayLike | None) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster sum of `values` and per-cluster sample count (each sample is its own cluster if None)."""
    v = np.asarray(values, dtype=float).ravel()
    if clusters is None:
        return v.copy(), np.ones(v.size, dtype=float)
    labels = np.asarray(clusters)
    if labels.shape[0] != v.size:
        raise ValueError(f"clusters has {labels.shape[0]} labels for {v.size} samples")
    _, inverse = np.unique(labels, return_inverse=True)
    return np.bincount(inverse, weights=v), np.bincount(inverse).astype(float)


def ratio_variance(sums: np.ndarray, counts: np.ndarray) -> float:
    """Cluster-robust (linearised) variance of the pooled mean sum(sums) / sum(counts), with the G / (G - 1)
    small-sample factor; 0 for fewer than two clusters."""
    g = sums.size
    if g < 2:
        return 0.0
    n = counts.sum()
    mean = sums.sum() / n
    resid = sums - mean * counts
    return float(g / (g - 1) * np.sum(resid**2) / n**2)


def worst_case_design_effect(counts: np.ndarray) -> float:
    """Design effect when every sample of a cluster has the same outcome (intra-class correlation 1):
    sum(m_k^2) / sum(m_k), the size-weighted mean cluster size."""
    return float(np.sum(counts**2) / np.sum(counts))


@dataclass(frozen=True)
class DesignEffect:
    """How much clustering inflates the variance of a pooled mean; `method` says where the value came from:
    "none" (no clusters, or one sample per cluster), "estimated" (cluster-robust / independent-sample variance,
    at least 1) or "worst case" (too few informative clusters to estimate it)."""

    deff: float
    method: str
    n_clusters: int
    n_informative_clusters: int

    def to_dict(self) -> dict:
        return asdict(self)


def design_effect(sums: np.ndarray, counts: np.ndarray, naive_variance: float, n_informative: int,
                  min_informative: int = MIN_INFORMATIVE_CLUSTERS) -> DesignEffect:
    """Design effect of a pooled mean from its cluster totals; never below 1 (clustering is not assumed to help)."""
    g = int(sums.size)
    if np.all(counts == 1):
        return DesignEffect(1.0, "none", g, n_informative)
    if n_informative < min_informative or naive_variance <= 0:
        return DesignEffect(worst_case_design_effect(counts), "worst case", g, n_informative)
    return DesignEffect(max(1.0, ratio_variance(sums, counts) / naive_variance), "estimated", g, n_informative)


def cluster_t_interval(values: ArrayLike, clusters: ArrayLike | None,
                       alpha: float = 0.05) -> tuple[float, float, float, float, int]:
    """(mean, se, low, high, df) of the pooled mean of numeric values: cluster-robust standard error and a Student t
    quantile with G - 1 degrees of freedom (sd/sqrt(n) and n - 1 without clusters). NaN bounds when undefined."""
    v = np.asarray(values, dtype=float).ravel()
    mean = float(v.mean())
    if clusters is None:
        df = v.size - 1
        se = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else math.nan
    else:
        sums, counts = cluster_totals(v, clusters)
        df = sums.size - 1
        se = math.sqrt(ratio_variance(sums, counts)) if sums.size > 1 else math.nan
    if df < 1 or not math.isfinite(se):
        return mean, math.nan, math.nan, math.nan, df
    if se == 0.0:
        return mean, 0.0, mean, mean, df
    low, high = sps.t.interval(1.0 - alpha, df=df, loc=mean, scale=se)
    return mean, se, float(low), float(high), df
