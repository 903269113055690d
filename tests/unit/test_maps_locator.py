"""The locator's box against hand computations on known maps, and the cell grid read from layout cells."""

from __future__ import annotations

import numpy as np
import pytest

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import HeadRef
from vrh_lmms.runs.maps.grid import cell_grid
from vrh_lmms.runs.maps.locator import LocatorSettings, locate_box, locate_cells
from vrh_lmms.runs.maps.views import view_maps

W, H, CELL = 150, 100, 28  # 6 x 4 cells of 28 px; the last column and row are clipped by the image edge


def layout_cells() -> tuple[np.ndarray, list[str]]:
    """Row-major cells as capture/layouts.assemble clips them, plus one thumbnail token (another view)."""
    cells = [(x, y, min(x + CELL, W), min(y + CELL, H)) for y in range(0, H, CELL) for x in range(0, W, CELL)]
    return np.array(cells + [(0, 0, W, H)], dtype=float), ["image"] * len(cells) + ["thumbnail"]


def blob_map(shape, blobs) -> np.ndarray:
    m = np.zeros(shape)
    for (r0, r1, c0, c1), value in blobs:
        m[r0:r1 + 1, c0:c1 + 1] = value
    return m


def test_grid_reads_the_layout_cells():
    cells, views = layout_cells()
    grid = cell_grid(cells, views, (W, H))
    assert grid.view == "image" and grid.shape == (4, 6)
    assert grid.x_edges.tolist() == [[0, 28], [28, 56], [56, 84], [84, 112], [112, 140], [140, 150]]
    assert grid.y_edges.tolist() == [[0, 28], [28, 56], [56, 84], [84, 100]]
    values = np.arange(len(cells), dtype=float)  # token i holds i; the thumbnail token is left out
    assert grid.to_grid(values).tolist() == np.arange(24, dtype=float).reshape(4, 6).tolist()


def test_one_blob_gives_the_blobs_cells_in_pixels():
    cells, views = layout_cells()
    grid = cell_grid(cells, views, (W, H))
    m = blob_map((4, 6), [((2, 3, 4, 5), 1.0)])  # rows 2-3, cols 4-5: the clipped corner
    box = locate_box(m, grid, LocatorSettings(sigma=0.0))
    assert box == (112.0, 56.0, 150.0, 100.0)
    assert locate_box(m, grid, LocatorSettings(sigma=0.0, threshold=0.5)) == box


def test_two_blobs_keep_the_largest():
    cells, views = layout_cells()
    grid = cell_grid(cells, views, (W, H))
    # a small bright blob (1 cell, more mass than any other cell) and a larger dim one (3 cells): both above the mean
    m = blob_map((4, 6), [((0, 0, 0, 0), 5.0), ((1, 3, 3, 3), 1.0)])
    assert m.mean() < 1.0
    assert locate_box(m, grid, LocatorSettings(sigma=0.0)) == (84.0, 28.0, 112.0, 100.0)
    # at 0.5 x max only the bright cell survives
    assert locate_box(m, grid, LocatorSettings(sigma=0.0, threshold=0.5)) == (0.0, 0.0, 28.0, 28.0)


def gaussian_by_hand(m: np.ndarray, sigma: float, truncate: float = 4.0) -> np.ndarray:
    """Separable Gaussian, zero outside the map (scipy's mode="constant"), radius round(truncate * sigma)."""
    r = int(truncate * sigma + 0.5)
    x = np.arange(-r, r + 1)
    k = np.exp(-x**2 / (2 * sigma**2))
    k /= k.sum()
    out = np.zeros_like(m)
    rows, cols = m.shape
    for i in range(rows):
        for j in range(cols):
            for a in range(-r, r + 1):
                for b in range(-r, r + 1):
                    if 0 <= i - a < rows and 0 <= j - b < cols:
                        out[i, j] += k[a + r] * k[b + r] * m[i - a, j - b]
    return out


# A map whose located box moves if the smoothing assumed anything beyond the image's edge (mode "reflect": columns
# 0-4) or the threshold were the raw map's mean (rows 1-3).
UNEVEN = [[0.22, 0.02, 0.0, 0.27, 0.08, 0.01], [0.06, 0.63, 0.76, 0.02, 0.11, 0.01],
          [0.12, 0.01, 0.02, 0.63, 0.0, 0.15], [0.0, 0.48, 0.38, 0.0, 0.59, 0.0], [0.01, 0.0, 0.04, 0.4, 0.0, 0.0]]


def test_smoothing_and_mean_threshold_match_a_hand_computation():
    from scipy.ndimage import label

    for m, peak in ((np.zeros((7, 9)), (3, 2)), (np.array(UNEVEN), (1, 2))):
        if not m.any():
            m[3, 2], m[5, 7] = 1.0, 0.2
        smooth = gaussian_by_hand(m, 1.0)
        labels, n = label(smooth >= smooth.mean())
        sizes = [(labels == i).sum() for i in range(1, n + 1)]
        rows, cols = np.nonzero(labels == 1 + int(np.argmax(sizes)))
        expected = ((rows.min(), rows.max()), (cols.min(), cols.max()))
        assert labels[peak] == 1 + int(np.argmax(sizes))
        assert locate_cells(m, LocatorSettings(sigma=1.0)) == expected
    assert expected == ((0, 4), (1, 4))
    assert locate_cells(np.zeros((7, 9)) + np.eye(7, 9), LocatorSettings(sigma=1.0))[0] == (0, 6)


def test_views_average_the_right_heads():
    rng = np.random.default_rng(0)
    per_head = rng.random((3, 4, 10))
    top = [HeadRef(0, 1), HeadRef(2, 3)]
    maps = view_maps(per_head, top)
    np.testing.assert_allclose(maps["top"], (per_head[0, 1] + per_head[2, 3]) / 2)
    np.testing.assert_allclose(maps["all"], per_head.mean(axis=(0, 1)))
    rest = [per_head[l, h] for l in range(3) for h in range(4) if (l, h) not in ((0, 1), (2, 3))]
    np.testing.assert_allclose(maps["rest"], np.mean(rest, axis=0))


def test_bad_inputs_get_one_line_errors():
    cells, views = layout_cells()
    grid = cell_grid(cells, views, (W, H))
    with pytest.raises(VRHError, match="does not match the grid"):
        locate_box(np.zeros((3, 3)), grid)
    with pytest.raises(VRHError, match="threshold"):
        LocatorSettings(threshold=1.5)
    with pytest.raises(VRHError, match="finite"):
        locate_cells(np.full((2, 2), np.nan))
