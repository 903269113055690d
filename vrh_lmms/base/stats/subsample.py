"""A drop measured on a fixed random subset of a task's docs (control draws evaluated on fewer docs than the top-k).

The subset is drawn by image (whole images in a seeded random order until the asked number of docs is reached), so
the image stays the unit of independence, and the same subset serves every draw, which keeps the between-draw
comparison paired. The drop on the subset is the ratio of image totals; its standard error is the cluster-robust
(linearised) one of `clusters.ratio_variance` computed on the subset's images. Two intervals come with it:

* `ci`: for the drop of the population the docs stand for (what every other interval of the report targets). The
  subsample is a smaller clustered sample, so its interval is wider by about sqrt(all docs / subset docs), and at
  the full doc set it is the cluster-robust t interval of the all-doc drop;
* `ci_docs`: for the drop that evaluating every doc would have printed; images drawn without replacement from the
  task's images, so the variance carries the finite-population factor (1 - g / G) and is 0 at the full set.

benchmarks/sim_control_docs.py measures both intervals' coverage under clustered outcomes (docs/sweeps.md).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as sps

from vrh_lmms.base.stats.clusters import cluster_totals, ratio_variance


def image_subsample(clusters: ArrayLike, n_docs: int, seed: int = 0) -> np.ndarray:
    """Sorted indices of a fixed random subset of at least `n_docs` docs (all docs if fewer) made of whole images:
    the images in a seeded random order, taken until `n_docs` docs are reached."""
    labels = np.asarray(clusters)
    if n_docs < 1:
        raise ValueError(f"a subsample needs at least one doc, got {n_docs}")
    _, inverse = np.unique(labels, return_inverse=True)
    sizes = np.bincount(inverse)
    order = np.random.default_rng(int(seed)).permutation(sizes.size)
    taken = int(np.searchsorted(np.cumsum(sizes[order]), min(n_docs, labels.size))) + 1
    chosen = np.zeros(sizes.size, dtype=bool)
    chosen[order[:taken]] = True
    return np.flatnonzero(chosen[inverse])


@dataclass(frozen=True)
class SubsampleDrop:
    """Drop = mean(baseline) - mean(ablated) on the subset's pairs, its standard errors and (1 - alpha) intervals
    (t with g - 1 degrees of freedom, g = images in the subset); see the module docstring for the two targets."""

    drop: float
    se: float
    ci_low: float
    ci_high: float
    se_docs: float
    ci_docs_low: float
    ci_docs_high: float
    n_docs: int
    n_images: int
    all_docs: int
    all_images: int

    def to_dict(self) -> dict:
        return asdict(self)


def subsample_drop(baseline: ArrayLike, ablated: ArrayLike, clusters: ArrayLike, all_clusters: ArrayLike,
                   alpha: float = 0.05) -> SubsampleDrop:
    """The drop of paired outcomes on a subset of docs (`clusters`: the subset's image ids), with intervals that
    account for the subsample; `all_clusters`: the image id of every doc of the task (the subset's among them)."""
    b = np.asarray(baseline, dtype=float).ravel()
    a = np.asarray(ablated, dtype=float).ravel()
    if b.size != a.size or b.size == 0:
        raise ValueError(f"paired arrays of {b.size} and {a.size} outcomes; need the same positive length")
    sums, counts = cluster_totals(b - a, clusters)
    g, big_g = sums.size, np.unique(np.asarray(all_clusters)).size
    if g > big_g:
        raise ValueError(f"the subset has {g} images, the task only {big_g}")
    drop = float(sums.sum() / counts.sum())
    var = ratio_variance(sums, counts)
    se, se_docs = math.sqrt(var), math.sqrt(max(0.0, 1.0 - g / big_g) * var)
    q = float(sps.t.ppf(1.0 - alpha / 2, df=g - 1)) if g > 1 else math.nan
    return SubsampleDrop(drop, se, drop - q * se, drop + q * se, se_docs, drop - q * se_docs, drop + q * se_docs,
                         int(b.size), int(g), int(np.asarray(all_clusters).size), int(big_g))
