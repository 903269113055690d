"""Control draws on a fixed random subset of docs: the subset is made of whole images, fixed by its seed; the drop's
intervals equal a hand computation of the linearised cluster variance (with and without the finite-population
factor); and in a clustered simulation both intervals cover their targets at about the nominal level."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from vrh_lmms.base.stats.subsample import image_subsample, subsample_drop

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import sim_control_docs as sim  # noqa: E402


def test_subsample_takes_whole_images_fixed_by_seed():
    clusters = np.repeat(np.arange(40), np.arange(40) % 5 + 1)  # 40 images of 1..5 docs
    idx = image_subsample(clusters, 30, seed=3)
    assert np.array_equal(idx, image_subsample(clusters, 30, seed=3))
    assert not np.array_equal(idx, image_subsample(clusters, 30, seed=4))
    chosen = set(clusters[idx])
    assert set(np.flatnonzero(np.isin(clusters, list(chosen)))) == set(idx), "every doc of a chosen image"
    assert idx.size >= 30
    # minimal: some chosen image, left out, brings the subset under 30 docs (the last image taken)
    assert min(idx.size - np.sum(clusters == c) for c in chosen) < 30
    assert image_subsample(clusters, 10_000).size == clusters.size
    with pytest.raises(ValueError):
        image_subsample(clusters, 0)


def _by_hand(diffs, clusters, big_g, alpha=0.05):
    labels = sorted(set(clusters))
    totals = [sum(d for d, c in zip(diffs, clusters) if c == lab) for lab in labels]
    sizes = [sum(1 for c in clusters if c == lab) for lab in labels]
    g, n = len(labels), sum(sizes)
    mean = sum(totals) / n
    var = g / (g - 1) * sum((t - mean * m) ** 2 for t, m in zip(totals, sizes)) / n**2
    q = sps.t.ppf(1 - alpha / 2, g - 1)
    se, se_docs = var**0.5, ((1 - g / big_g) * var) ** 0.5
    return mean, (mean - q * se, mean + q * se), (mean - q * se_docs, mean + q * se_docs)


def test_intervals_equal_hand_computation():
    rng = np.random.default_rng(0)
    clusters = np.repeat(np.arange(60), rng.integers(1, 7, 60))
    base = (rng.random(clusters.size) < 0.7).astype(float)
    abl = base * (rng.random(clusters.size) > 0.2)
    idx = image_subsample(clusters, 100, seed=1)
    got = subsample_drop(base[idx], abl[idx], clusters[idx], clusters)
    mean, ci, ci_docs = _by_hand(list(base[idx] - abl[idx]), list(clusters[idx]), 60)
    assert got.drop == pytest.approx(mean, abs=1e-12)
    assert (got.ci_low, got.ci_high) == pytest.approx(ci, abs=1e-12)
    assert (got.ci_docs_low, got.ci_docs_high) == pytest.approx(ci_docs, abs=1e-12)
    assert got.n_images == len(set(clusters[idx])) and got.all_images == 60
    full = subsample_drop(base, abl, clusters, clusters)  # every doc: the all-doc value is known exactly
    assert full.ci_docs_low == full.ci_docs_high == full.drop == pytest.approx((base - abl).mean())


def test_coverage_under_clustered_outcomes():
    """300 simulated tasks (300 images each), subsets of 400 docs: 95% intervals cover 90-99% of the time (the
    binomial 99.9% band around 95% for 300 replicates is about 91-98%)."""
    draws = (-2.2, -2.6)
    truth = sim.expected_drops(0, 5.7, draws)
    rng = np.random.default_rng(1)
    hits = np.zeros(3)
    reps = 300
    for rep in range(reps):
        image, base, (a1, a2) = sim.task(rng, 300, 5.7, draws)
        idx = image_subsample(image, 400, seed=rep)
        one = subsample_drop(base[idx], a1[idx], image[idx], image)
        diff = subsample_drop(a2[idx], a1[idx], image[idx], image)
        hits += [one.ci_low <= truth[0] <= one.ci_high,
                 one.ci_docs_low <= (base - a1).mean() <= one.ci_docs_high,
                 diff.ci_low <= truth[0] - truth[1] <= diff.ci_high]
    assert np.all((hits / reps >= 0.90) & (hits / reps <= 0.99)), hits / reps
