"""The drop of an ablation against its baseline with the interval the report prints.

0/1 outcomes: Tango's score interval for paired proportions (vrh_lmms.base.stats.tango) on counts divided by the design
effect of the paired differences (Rao-Scott): images whose expressions flip together widen it, and it stays
informative with few or no discordant pairs, where any bootstrap collapses (zero discordant pairs give [0, 0]).
With fewer than MIN_INFORMATIVE_CLUSTERS images holding a discordant pair the design effect cannot be estimated and
its worst case (every expression of an image flips together) is used. Numeric scores (`--score-field iou`) get a
t interval with the cluster-robust standard error and G - 1 degrees of freedom. The BCa cluster bootstrap is reported
beside both, for comparison (tests/acceptance/test_stats_coverage.py measures all of them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike

from vrh_lmms.base.stats.accuracy import is_binary
from vrh_lmms.base.stats.bootstrap import paired_bootstrap_drop
from vrh_lmms.base.stats.clusters import cluster_t_interval, cluster_totals, design_effect
from vrh_lmms.base.stats.interval import HasInterval
from vrh_lmms.base.stats.tango import tango_interval


@dataclass(frozen=True)
class DropResult(HasInterval):
    """Drop = mean(baseline) - mean(ablated) on paired samples and its (1 - alpha) CI made by `method`
    ("tango score, design-effect adjusted" or "cluster-robust t"); `bootstrap` holds the BCa cluster bootstrap
    interval (None when it was not asked for)."""

    drop: float
    ci_low: float
    ci_high: float
    method: str
    n_pairs: int
    n_clusters: int
    lost: int | None
    gained: int | None
    n_discordant_clusters: int
    deff: float
    deff_method: str
    bootstrap: dict | None

    def to_dict(self) -> dict:
        return asdict(self)


def paired_drop(baseline: ArrayLike, ablated: ArrayLike, clusters: ArrayLike | None = None, *, alpha: float = 0.05,
                n_resamples: int = 10_000, seed: int = 0, bootstrap: bool = True) -> DropResult:
    """Drop with its cluster-aware (1 - alpha) CI; `clusters[i]` is the image of pair i (None: every pair alone).

    `bootstrap=False` skips the BCa cluster bootstrap reported beside the printed interval."""
    b = np.asarray(baseline, dtype=float).ravel()
    a = np.asarray(ablated, dtype=float).ravel()
    if b.size != a.size:
        raise ValueError(f"paired arrays differ in length: {b.size} baseline vs {a.size} ablated")
    if b.size == 0:
        raise ValueError("the drop of zero pairs is undefined")
    binary = is_binary(b) and is_binary(a)
    boot = paired_bootstrap_drop(b, a, clusters, n_resamples=n_resamples, alpha=alpha, seed=seed) if bootstrap else None
    boot_dict = None if boot is None else boot.to_dict()
    diffs = b - a
    sums, counts = cluster_totals(diffs, clusters)
    discordant, _ = cluster_totals((diffs != 0).astype(float), clusters)
    n_disc_clusters = int(np.sum(discordant > 0))
    n = diffs.size
    if not binary:
        mean, se, low, high, _ = cluster_t_interval(diffs, clusters, alpha)
        naive = float(np.var(diffs, ddof=1) / n) if n > 1 else 0.0
        deff = design_effect(sums, counts, naive, n_disc_clusters)
        return DropResult(mean, low, high, "cluster-robust t", n, int(sums.size), None, None, n_disc_clusters,
                          deff.deff, deff.method, boot_dict)
    lost, gained = int(np.sum(diffs > 0)), int(np.sum(diffs < 0))
    mean = (lost - gained) / n
    naive = ((lost + gained) / n - mean**2) / n  # McNemar variance of the mean difference
    deff = design_effect(sums, counts, naive, n_disc_clusters)
    low, high = tango_interval(lost / deff.deff, gained / deff.deff, n / deff.deff, alpha=alpha)
    return DropResult(float(diffs.mean()), low, high, "tango score, design-effect adjusted", n, int(sums.size), lost,
                      gained, n_disc_clusters, deff.deff, deff.method, boot_dict)

