"""A map over the image's cells -> one box in pixels: the Localization Heads recipe (Kang et al., CVPR 2025).

Steps, each a documented setting of `LocatorSettings`:
1. smooth the (rows, cols) map with a Gaussian of `sigma` cells (scipy.ndimage.gaussian_filter, mode "constant":
   nothing is assumed beyond the image's edge);
2. threshold: keep cells at or above the smoothed map's mean (`threshold="mean"`), or at or above a fraction of its
   maximum (`threshold=0.5` keeps cells >= 0.5 x max);
3. label 4-connected components (scipy.ndimage.label) and keep the largest by cell count (ties: the one holding more
   smoothed mass, then the first in row-major order);
4. its bounding rows/columns -> pixels through the layout's cell edges (vrh_lmms.runs.maps.grid.CellGrid.cell_box).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy import ndimage

from vrh_lmms.base.errors import VRHError
from vrh_lmms.runs.maps.grid import CellGrid


@dataclass(frozen=True)
class LocatorSettings:
    sigma: float = 1.0  # Gaussian standard deviation in cells; 0 = no smoothing
    threshold: str | float = "mean"  # "mean", or a fraction in (0, 1] of the smoothed map's maximum

    def __post_init__(self) -> None:
        if self.sigma < 0:
            raise VRHError(f"locator sigma must be >= 0 cells, got {self.sigma}")
        if self.threshold != "mean" and not (isinstance(self.threshold, float) and 0 < self.threshold <= 1):
            raise VRHError(f"locator threshold must be 'mean' or a fraction in (0, 1] of the maximum, "
                           f"got {self.threshold!r}")

    def to_dict(self) -> dict:
        return asdict(self)


def parse_threshold(text: str) -> str | float:
    """CLI form: "mean" or a number in (0, 1]."""
    if text.strip().lower() == "mean":
        return "mean"
    try:
        return float(text)
    except ValueError:
        raise VRHError(f"--threshold {text!r}: use 'mean' or a fraction of the maximum such as 0.5") from None


def largest_component(mask: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """The largest 4-connected component of `mask` (ties: more `weight`, then first in row-major order)."""
    labels, n = ndimage.label(mask)
    if n == 0:
        raise VRHError("the thresholded map is empty; nothing to locate")
    ids = np.arange(1, n + 1)
    sizes = ndimage.sum_labels(np.ones_like(weight), labels, ids)
    masses = ndimage.sum_labels(weight, labels, ids)
    best = max(range(n), key=lambda i: (sizes[i], masses[i], -i))
    return labels == ids[best]


def locate_cells(grid_map: np.ndarray, settings: LocatorSettings = LocatorSettings()) -> tuple[tuple[int, int],
                                                                                               tuple[int, int]]:
    """(row0, row1), (col0, col1), inclusive, of the located component of a (rows, cols) map."""
    m = np.asarray(grid_map, dtype=float)
    if m.ndim != 2 or m.size == 0 or not np.all(np.isfinite(m)):
        raise VRHError(f"the locator needs a finite, non-empty (rows, cols) map, got shape {m.shape}")
    smooth = ndimage.gaussian_filter(m, sigma=settings.sigma, mode="constant") if settings.sigma > 0 else m
    level = smooth.mean() if settings.threshold == "mean" else float(settings.threshold) * smooth.max()
    mask = smooth >= level
    if np.all(smooth == smooth.flat[0]):  # a flat map says nowhere in particular: the whole image
        mask = np.ones_like(mask)
    comp = largest_component(mask, smooth)
    rows, cols = np.nonzero(comp)
    return (int(rows.min()), int(rows.max())), (int(cols.min()), int(cols.max()))


def locate_box(grid_map: np.ndarray, grid: CellGrid, settings: LocatorSettings = LocatorSettings(),
               ) -> tuple[float, float, float, float]:
    """The located box in original-image pixels [x1, y1, x2, y2]."""
    if tuple(np.shape(grid_map)) != grid.shape:
        raise VRHError(f"map shape {np.shape(grid_map)} does not match the grid {grid.shape}")
    rows, cols = locate_cells(grid_map, settings)
    return grid.cell_box(rows, cols)
