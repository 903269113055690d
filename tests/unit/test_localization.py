"""The Localization Heads scorer against an independent re-implementation of the released method's steps (Kang et
al., CVPR 2025: chord elbow on the heads' image mass, relu(S - 2 mean) > 0.001, 8-connected components by
breadth-first search, mass-weighted entropy, bottom-row and layer 0/1 filters, top-k lowest entropy per sample with
the largest-mass fallback, frequency across samples), written here with plain loops, and on maps of known shape."""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import pytest

from vrh_lmms.base.errors import VRHError
from vrh_lmms.runs.discovery.localization import (
    ENTROPY,
    IMAGE_SUM,
    elbow_value,
    frequency,
    sample_statistics,
    selection,
    spatial_entropy,
)


def ref_entropy(grid: list[list[float]]) -> float:
    rows, cols = len(grid), len(grid[0])
    mean = sum(map(sum, grid)) / (rows * cols)
    high = [[max(v - 2 * mean, 0.0) for v in row] for row in grid]
    total = sum(map(sum, high))
    if total <= 0:
        return math.inf
    seen = [[False] * cols for _ in range(rows)]
    probs = []
    for r in range(rows):
        for c in range(cols):
            if seen[r][c] or not high[r][c] > 1e-3:
                continue
            mass, todo = 0.0, deque([(r, c)])
            seen[r][c] = True
            while todo:
                y, x = todo.popleft()
                mass += high[y][x]
                for dy in (-1, 0, 1):
                    for dx in (-1, 0, 1):
                        yy, xx = y + dy, x + dx
                        if 0 <= yy < rows and 0 <= xx < cols and not seen[yy][xx] and high[yy][xx] > 1e-3:
                            seen[yy][xx] = True
                            todo.append((yy, xx))
            probs.append(mass / total)
    return -sum(p * math.log(p) for p in probs if p > 0)


def ref_elbow(values: list[float]) -> float:
    y = sorted(values)
    if len(y) <= 2:
        return min(y)
    x0, y0, x1, y1 = 0.0, y[0], float(len(y) - 1), y[-1]
    norm = math.hypot(x1 - x0, y1 - y0)
    dist = [abs((x1 - x0) * (y0 - yi) - (x0 - i) * (y1 - y0)) / norm for i, yi in enumerate(y)]
    return y[max(range(len(y)), key=lambda i: (dist[i], -i))]


def ref_selected(maps: np.ndarray, k: int) -> set[tuple[int, int]]:
    """One sample, the released `_identify_localization_heads` steps, as loops over dicts."""
    layers, heads = maps.shape[:2]
    sums = {(l, h): float(maps[l, h].sum()) for l in range(layers) for h in range(heads)}
    thr = ref_elbow(list(sums.values()))
    candidates, bottom = [], set()
    for (l, h), s in sums.items():
        if maps[l, h][-1].max() > 0.05:
            bottom.add((l, h))
            continue
        se = ref_entropy(maps[l, h].tolist()) if s >= thr else math.inf
        candidates.append({"head": (l, h), "sum": s, "se": se})
    kept = [c for c in candidates if math.isfinite(c["se"]) and c["head"][0] > 1]
    if not kept:
        rest = sorted((c for c in candidates if c["head"] not in bottom), key=lambda c: -c["sum"])
        kept = rest[:1]
    kept.sort(key=lambda c: c["se"])
    return {c["head"] for c in kept[:k]}


def attention_maps(rng: np.random.Generator, layers: int = 5, heads: int = 4, shape=(6, 7)) -> np.ndarray:
    """Softmax-like maps: each head puts a random share of its mass on the image, peaked on a few random cells."""
    out = np.empty((layers, heads, *shape))
    for l in range(layers):
        for h in range(heads):
            logits = rng.normal(0, rng.uniform(0.3, 3.0), shape)
            p = np.exp(logits) / np.exp(logits).sum()
            out[l, h] = p * rng.beta(0.6, 1.5)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_matches_reference_on_random_maps(seed):
    rng = np.random.default_rng(seed)
    maps = attention_maps(rng)
    stats = sample_statistics(maps)
    for l in range(maps.shape[0]):
        for h in range(maps.shape[1]):
            got = stats[ENTROPY][l, h]
            if np.isfinite(got):
                assert got == pytest.approx(ref_entropy(maps[l, h].tolist()), abs=1e-12)
    np.testing.assert_allclose(spatial_entropy(maps[3, 1]), ref_entropy(maps[3, 1].tolist()), atol=1e-12)
    assert elbow_value(maps.sum(axis=(2, 3))) == pytest.approx(ref_elbow(maps.sum(axis=(2, 3)).ravel().tolist()))
    for k in (1, 3, 5):
        chosen = selection(stats[ENTROPY], stats[IMAGE_SUM], k)
        assert {(int(l), int(h)) for l, h in zip(*np.nonzero(chosen), strict=True)} == ref_selected(maps, k)


def test_frequency_across_samples_matches_reference():
    rng = np.random.default_rng(99)
    samples = [attention_maps(rng) for _ in range(9)]
    stats = [sample_statistics(m) for m in samples]
    got = frequency(np.stack([s[ENTROPY] for s in stats]), np.stack([s[IMAGE_SUM] for s in stats]), 3)
    expect = np.zeros(samples[0].shape[:2])
    for m in samples:
        for l, h in ref_selected(m, 3):
            expect[l, h] += 1 / len(samples)
    np.testing.assert_allclose(got, expect)
    # a sample without a capture (all NaN) is left out, not counted as selecting nothing
    nan = np.full_like(stats[0][ENTROPY], np.nan)
    with_gap = frequency(np.stack([*(s[ENTROPY] for s in stats), nan]),
                         np.stack([*(s[IMAGE_SUM] for s in stats), nan]), 3)
    np.testing.assert_allclose(with_gap, expect)


def test_a_concentrated_blob_has_lower_entropy_than_scattered_noise():
    rng = np.random.default_rng(1)
    blob = np.full((8, 8), 1e-4)
    blob[2:4, 3:6] = 0.08
    noise = rng.random((8, 8)) ** 8
    noise *= blob.sum() / noise.sum()
    assert spatial_entropy(blob) == pytest.approx(0.0)  # one component holds all of the mass
    assert spatial_entropy(noise) > 1.0
    two = blob.copy()
    two[6, 0:2] = 0.08  # a second, separate region: two components
    assert 0.0 < spatial_entropy(two) < spatial_entropy(noise)
    assert spatial_entropy(np.full((4, 4), 0.01)) == np.inf  # nothing rises above twice the mean


def test_filters_and_fallback():
    maps = np.zeros((4, 2, 5, 5))
    maps[:, :, :, :] = 1e-4
    maps[3, 0, 1, 1] = 0.5  # a focused head in a late layer
    maps[3, 1, 4, 2] = 0.5  # as focused, but on the bottom row: dropped
    maps[0, 0, 2, 2] = 0.9  # the most image mass, but in layer 0: dropped from the candidates
    stats = sample_statistics(maps)
    assert np.isfinite(stats[ENTROPY][3, 0]) and np.isinf(stats[ENTROPY][3, 1]) and np.isinf(stats[ENTROPY][0, 0])
    assert np.isnan(stats[IMAGE_SUM][3, 1])
    assert selection(stats[ENTROPY], stats[IMAGE_SUM], 5)[3, 0] == 1 and selection(
        stats[ENTROPY], stats[IMAGE_SUM], 5).sum() == 1
    only_early = np.full((4, 2), np.inf)
    fallback = selection(only_early, stats[IMAGE_SUM], 3)
    assert fallback[0, 0] == 1 and fallback.sum() == 1  # no candidate: the head of largest image mass
    with pytest.raises(VRHError, match="layers, heads, rows, cols"):
        sample_statistics(np.zeros((2, 5, 5)))
