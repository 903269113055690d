"""The primary paired test of an ablation against its baseline: a sign-flip test on per-image differences.

Under H0 the ablation changes nothing systematic, so for each image the labels "baseline" and "ablated" could be
swapped: the image's summed difference D_k = sum_i (baseline_i - ablated_i) is as likely to be +D_k as -D_k, however
strongly the image's expressions flip together. The test statistic is T = sum_k D_k (the drop times n) and its null
distribution is that of sum_k s_k |D_k| over independent random signs s_k. Durkalski's clustered McNemar statistic
T^2 / sum_k D_k^2 (Durkalski et al. 2003, Statistics in Medicine 22) is the normal approximation of this test; its
chi-square p-value is reported beside it.

`alternative` follows scipy.stats: "two-sided" (default; any systematic change), "greater" (the ablation lowers
the outcome: T is large) or "less"; the one-sided p-values are the null's upper or lower tail at T.

For 0/1 outcomes the D_k are integers and the null distribution is computed exactly (a convolution of binomials, one
per distinct |D_k|), so with one sample per image the test *is* the exact McNemar test. Non-integer scores use
`n_resamples` random sign flips, p = (1 + #{|T*| >= |T|}) / (1 + n_resamples).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import binom, chi2

from vrh_lmms.base.stats.clusters import cluster_totals
from vrh_lmms.base.stats.interval import check_alternative

# Flips per vectorised block of the Monte Carlo version: bounds the sign matrix to ~16 MB.
_BLOCK_CELLS = 2_000_000


@dataclass(frozen=True)
class SignFlipResult:
    """p-value of H0: no systematic change (`alternative`), with the images as the units; `method` is "exact" or
    "monte carlo"; `n_informative_clusters` counts images with a non-zero summed difference (the only ones that
    carry information, as discordant pairs do in McNemar's test)."""

    statistic: float
    pvalue: float
    method: str
    n_pairs: int
    n_clusters: int
    n_informative_clusters: int
    n_resamples: int | None
    durkalski_chi2: float | None
    durkalski_pvalue: float | None
    alternative: str = "two-sided"

    def to_dict(self) -> dict:
        return asdict(self)


def _tail(t: np.ndarray, t_obs: float, alternative: str, tol: float = 0.0) -> np.ndarray:
    """Which null values of T are at least as extreme as t_obs under `alternative`."""
    if alternative == "greater":
        return t >= t_obs - tol
    if alternative == "less":
        return t <= t_obs + tol
    return np.abs(t) >= abs(t_obs) - tol


def _exact(abs_d: np.ndarray, t_obs: int, alternative: str = "two-sided") -> float:
    """P(T* as extreme as t_obs) for integer |D_k| > 0, T* = sum_k s_k |D_k|, via S = sum over values v of
    v * Binomial(n_v, 1/2): T = 2 S - M with M = sum |D_k|."""
    values, n_per = np.unique(abs_d, return_counts=True)
    total = int(np.sum(values * n_per))
    pmf = np.zeros(total + 1)
    pmf[0] = 1.0
    top = 0
    for v, n_v in zip(values.astype(int), n_per.astype(int), strict=True):
        part = np.zeros(v * n_v + 1)
        part[::v] = binom.pmf(np.arange(n_v + 1), n_v, 0.5)
        pmf = np.convolve(pmf[: top + 1], part)
        top += v * n_v
    t = 2 * np.arange(total + 1) - total
    return float(min(1.0, pmf[_tail(t, t_obs, alternative)].sum()))


def _monte_carlo(abs_d: np.ndarray, t_obs: float, n_resamples: int, seed: int, alternative: str = "two-sided") -> float:
    rng = np.random.default_rng(seed)
    ge = 0
    block = max(1, _BLOCK_CELLS // abs_d.size)
    tol = 1e-9 * max(1.0, float(abs_d.sum()))
    for start in range(0, n_resamples, block):
        size = min(block, n_resamples - start)
        signs = rng.integers(0, 2, size=(size, abs_d.size), dtype=np.int8) * 2 - 1
        ge += int(np.sum(_tail(signs @ abs_d, t_obs, alternative, tol)))
    return (1.0 + ge) / (1.0 + n_resamples)


def sign_flip_test(baseline: ArrayLike, ablated: ArrayLike, clusters: ArrayLike | None = None, *,
                   n_resamples: int = 10_000, seed: int = 0, alternative: str = "two-sided") -> SignFlipResult:
    """Cluster sign-flip test of paired outcomes; `clusters[i]` is the image of pair i (None: every pair alone)."""
    check_alternative(alternative)
    b = np.asarray(baseline, dtype=float).ravel()
    a = np.asarray(ablated, dtype=float).ravel()
    if b.size != a.size:
        raise ValueError(f"paired arrays differ in length: {b.size} baseline vs {a.size} ablated")
    if b.size == 0:
        raise ValueError("a paired test of zero pairs is undefined")
    sums, _ = cluster_totals(b - a, clusters)
    d = sums[sums != 0.0]
    t_obs = float(d.sum())
    if d.size == 0:
        return SignFlipResult(0.0, 1.0, "exact", int(b.size), int(sums.size), 0, None, None, None, alternative)
    integer = bool(np.all(np.abs(d - np.round(d)) < 1e-9))
    if integer:
        p = _exact(np.round(np.abs(d)).astype(np.int64), int(round(t_obs)), alternative)
        method, resamples = "exact", None
    else:
        p = _monte_carlo(np.abs(d), t_obs, n_resamples, seed, alternative)
        method, resamples = "monte carlo", int(n_resamples)
    stat = t_obs**2 / float(np.sum(d**2))
    return SignFlipResult(t_obs, p, method, int(b.size), int(sums.size), int(d.size), resamples, float(stat),
                          float(chi2.sf(stat, 1)), alternative)
