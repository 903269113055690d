"""Image tokens -> a 2-D grid of cells in original-image pixels, read from the layout (capture/layouts.py).

A layout gives every image token the cell of the original image it covers (`ImageTokenMap.cells`, pixels). For one
view (one rendering of the image: "image" for Qwen-style single grids; tiles and a thumbnail elsewhere) the cells
tile the image in rows and columns; the grid's column edges are the distinct left edges of the cells (each column's
right edge the largest right edge seen in it), the rows likewise. Nothing is recomputed from patch sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vrh_lmms.base.errors import VRHError


@dataclass(frozen=True)
class CellGrid:
    """Rows x columns of cells: `x_edges[c]` = (left, right) pixel span of column c, `y_edges[r]` of row r;
    `token_cell[i]` = (row, col) of token i of the chosen view (index into the view's tokens)."""

    x_edges: np.ndarray  # (cols, 2)
    y_edges: np.ndarray  # (rows, 2)
    token_cell: np.ndarray  # (n_tokens, 2) int: row, col
    token_index: np.ndarray  # (n_tokens,) int: index of each token in ImageTokenMap.positions
    image_size: tuple[int, int]  # (width, height)
    view: str

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.y_edges), len(self.x_edges)

    def to_grid(self, values: np.ndarray) -> np.ndarray:
        """(n_map_tokens,) values over ImageTokenMap.positions -> (rows, cols) grid of this view (cells several
        tokens share, if any, add up)."""
        values = np.asarray(values, dtype=float)
        out = np.zeros(self.shape)
        np.add.at(out, (self.token_cell[:, 0], self.token_cell[:, 1]), values[self.token_index])
        return out

    def cell_box(self, rows: tuple[int, int], cols: tuple[int, int]) -> tuple[float, float, float, float]:
        """Pixel box [x1, y1, x2, y2] spanning rows r0..r1 and columns c0..c1 (inclusive)."""
        return (float(self.x_edges[cols[0], 0]), float(self.y_edges[rows[0], 0]),
                float(self.x_edges[cols[1], 1]), float(self.y_edges[rows[1], 1]))

    def to_dict(self) -> dict:
        return {"view": self.view, "rows": self.shape[0], "cols": self.shape[1],
                "x_edges": self.x_edges.round(3).tolist(), "y_edges": self.y_edges.round(3).tolist(),
                "image_size": list(self.image_size)}


def _edges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    starts = np.unique(lo)
    index = np.searchsorted(starts, lo)
    ends = np.array([hi[index == i].max() for i in range(len(starts))])
    return np.stack([starts, ends], axis=1), index


def main_view(views: list[str]) -> str:
    """The view with the most tokens (a single grid's "image"; the tiles of a tiling family), first seen on ties."""
    if not views:
        raise VRHError("the image has no tokens with a cell; nothing to map")
    counts = {v: views.count(v) for v in dict.fromkeys(views)}
    return max(counts, key=counts.__getitem__)


def cell_grid(cells: np.ndarray, views: list[str], image_size: tuple[int, int], view: str | None = None) -> CellGrid:
    """The grid of one view's cells (default `main_view`); cells: (n, 4) [x1, y1, x2, y2] pixels as the layout
    gives them (ImageTokenMap.cells)."""
    cells = np.asarray(cells, dtype=float).reshape(-1, 4)
    if len(views) != len(cells):
        raise VRHError(f"{len(cells)} cells but {len(views)} view names")
    chosen = view or main_view(views)
    index = np.array([i for i, v in enumerate(views) if v == chosen], dtype=int)
    if index.size == 0:
        raise VRHError(f"no image token belongs to view {chosen!r}; views: {', '.join(sorted(set(views)))}")
    sub = cells[index]
    x_edges, cols = _edges(sub[:, 0], sub[:, 2])
    y_edges, rows = _edges(sub[:, 1], sub[:, 3])
    return CellGrid(x_edges=x_edges, y_edges=y_edges, token_cell=np.stack([rows, cols], axis=1),
                    token_index=index, image_size=(int(image_size[0]), int(image_size[1])), view=chosen)
