"""The Localization Heads scorer (Kang et al., "Your Large Vision-Language Model Only Needs A Few Attention Heads For
Visual Grounding", CVPR 2025), as pure numpy on per-head attention maps over the image's token grid.

The steps follow their released code (github.com/seilk/LocalizationHeads; that repository is not in the code index
this was written from, so the steps were read from two public copies that say they are modified from it and agree
with each other: the `_spatial_entropy` / `_elbow_chord` / `_identify_localization_heads` functions):

per sample, with the query row = the last input token (the row that emits the first answer token):
  (a) criterion 1: each head's attention mass on the image tokens; the chord elbow of the ascending-sorted masses
      (the point farthest from the line joining the first and last point) is a threshold value; heads at or above it
      are candidates;
  (b) criterion 2: a candidate's map over the token grid S; B = relu(S - 2 mean(S)); binary = B > 0.001;
      8-connected components (scipy.ndimage.label with a 3x3 structure); p_i = the component's share of B's mass;
      spatial entropy = -sum p_i log p_i (inf when B has no mass; 0 when B has mass but no cell passes 0.001, as
      the released code does). Heads whose bottom grid row holds a value > 0.05 are dropped (an artefact the
      authors filter), and so are layers 0 and 1;
  (c) the k candidates of lowest spatial entropy are the sample's selection (ties: layer, then head); when no
      candidate survives, the head of largest image mass (bottom-row heads excluded) stands in (their min_keep=1);
across samples:
  (d) Omega = freq: the share of samples that select a head.

Per sample, discovery stores ENTROPY ((layers, heads): the spatial entropy of candidates, +inf elsewhere) and
IMAGE_SUM (the image mass, NaN for bottom-row heads); `frequency` does (c) and (d) on those.
"""

from __future__ import annotations

import numpy as np
from scipy.ndimage import label

from vrh_lmms.base.errors import VRHError

ENTROPY = "loc_entropy"
IMAGE_SUM = "loc_image_sum"
BINARIZE = 1e-3  # their binarization threshold on relu(S - 2 mean)
BOTTOM_ROW = 0.05  # a head with any bottom-row cell above this is dropped
MIN_LAYER = 2  # layers 0 and 1 are dropped
_EIGHT = np.ones((3, 3), dtype=int)


def elbow_value(values: np.ndarray) -> float:
    """Chord elbow of the ascending-sorted values: the value (not the index) farthest from the first-last chord."""
    y = np.sort(np.asarray(values, dtype=np.float64).ravel())
    if y.size <= 2:
        return float(y.min()) if y.size else 0.0
    x = np.arange(y.size, dtype=np.float64)
    start = np.array([x[0], y[0]])
    line = np.array([x[-1], y[-1]]) - start
    length = np.linalg.norm(line)
    if length == 0:
        return float(y[0])
    unit = line / length
    vecs = np.stack([x, y], axis=1) - start
    dist = np.linalg.norm(vecs - (vecs @ unit)[:, None] * unit, axis=1)
    return float(y[int(np.argmax(dist))])


def spatial_entropy(grid: np.ndarray, threshold: float = BINARIZE) -> float:
    """Spatial entropy of one (rows, cols) attention map: lower = one concentrated region."""
    grid = np.asarray(grid, dtype=np.float64)
    if grid.ndim != 2:
        raise VRHError(f"spatial entropy needs a 2-D map, got shape {grid.shape}")
    high = np.maximum(grid - 2 * grid.mean(), 0.0)
    total = high.sum()
    if total <= 0:
        return float("inf")
    labelled, count = label(high > threshold, structure=_EIGHT)
    if count == 0:
        return 0.0
    mass = np.bincount(labelled.ravel(), weights=high.ravel(), minlength=count + 1)[1:] / total
    mass = mass[mass > 0]
    return float(-(mass * np.log(mass)).sum())


def sample_statistics(maps: np.ndarray) -> dict[str, np.ndarray]:
    """Steps (a) and (b) for one sample. maps: (layers, heads, rows, cols) attention of the query row on the image
    tokens placed on the token grid (0 where the grid has no token)."""
    maps = np.asarray(maps, dtype=np.float64)
    if maps.ndim != 4 or min(maps.shape) == 0:
        raise VRHError(f"localization maps must be (layers, heads, rows, cols), got shape {maps.shape}")
    layers, heads = maps.shape[:2]
    sums = maps.sum(axis=(2, 3))
    threshold = elbow_value(sums)
    bottom = (maps[:, :, -1, :] > BOTTOM_ROW).any(axis=-1)
    entropy = np.full((layers, heads), np.inf)
    for layer in range(MIN_LAYER, layers):
        for head in range(heads):
            if sums[layer, head] >= threshold and not bottom[layer, head]:
                entropy[layer, head] = spatial_entropy(maps[layer, head])
    return {ENTROPY: entropy, IMAGE_SUM: np.where(bottom, np.nan, sums)}


def selection(entropy: np.ndarray, image_sum: np.ndarray, k: int) -> np.ndarray:
    """Step (c) for one sample: (layers, heads) 0/1, the k finite-entropy heads of lowest entropy (ties: layer,
    then head), or the head of largest image mass when none is finite. All-NaN input (no capture) gives NaN."""
    if k < 1:
        raise VRHError(f"localization heads: k must be at least 1, got {k}")
    entropy = np.asarray(entropy, dtype=np.float64)
    out = np.zeros(entropy.size)
    if np.isnan(entropy).all():
        return np.full(entropy.shape, np.nan)
    flat = entropy.ravel()
    finite = np.flatnonzero(np.isfinite(flat))
    if finite.size:
        order = finite[np.argsort(flat[finite], kind="stable")]
        out[order[:k]] = 1.0
    else:
        mass = np.asarray(image_sum, dtype=np.float64).ravel()
        if np.isnan(mass).all():
            return np.full(entropy.shape, np.nan)
        out[int(np.nanargmax(mass))] = 1.0
    return out.reshape(entropy.shape)


def frequency(entropy: np.ndarray, image_sum: np.ndarray, k: int) -> np.ndarray:
    """Step (d): (n, layers, heads) per-sample statistics -> (layers, heads) share of samples selecting each head
    (samples without a capture are left out; NaN everywhere when none has one)."""
    chosen = np.stack([selection(e, s, k) for e, s in zip(entropy, image_sum, strict=True)])
    valid = ~np.isnan(chosen).all(axis=(1, 2))
    if not valid.any():
        return np.full(chosen.shape[1:], np.nan)
    return chosen[valid].mean(axis=0)
