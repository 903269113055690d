"""One doc's attention maps as a PNG (the paper's Fig A1 view): one panel per map over the image, each with the
ground-truth box (green), the model's predicted box (red, dashed) and, where given, the located box (blue)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle

from vrh_lmms.runs.maps.grid import CellGrid

Box = Sequence[float]


def _draw_box(ax, box: Box | None, colour: str, style: str, label: str) -> None:
    if box is None:
        return
    x1, y1, x2, y2 = (float(v) for v in box)
    ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, edgecolor=colour, linestyle=style, linewidth=2,
                           label=label))


def _edges(spans: np.ndarray) -> np.ndarray:
    """Contiguous mesh edges from (n, 2) spans: each start, then the last end."""
    return np.append(spans[:, 0], spans[-1, 1])


def maps_figure(image: np.ndarray | None, grid: CellGrid, panels: Sequence[tuple[str, np.ndarray]], gt_box: Box,
                pred_box: Box | None, path: str | Path, title: str = "", located: Box | None = None) -> Path:
    """Write the PNG; panels: (title, (rows, cols) map) in order. Each panel's colour scale is its own (the maps'
    totals differ), so a panel shows where its heads look, not how much."""

    w, h = grid.image_size
    fig, axes = plt.subplots(1, len(panels), figsize=(3.4 * len(panels), 3.6), squeeze=False)
    for ax, (name, grid_map) in zip(axes[0], panels, strict=True):
        if image is not None:
            ax.imshow(image, extent=(0, w, h, 0))
        mesh = ax.pcolormesh(_edges(grid.x_edges), _edges(grid.y_edges), grid_map, cmap="inferno",
                             alpha=0.6 if image is not None else 1.0, shading="flat")
        fig.colorbar(mesh, ax=ax, fraction=0.046, pad=0.04)
        _draw_box(ax, gt_box, "lime", "-", "ground truth")
        _draw_box(ax, pred_box, "red", "--", "model's answer")
        _draw_box(ax, located, "deepskyblue", ":", "located")
        ax.set_xlim(0, w)
        ax.set_ylim(h, 0)
        ax.set_title(name, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
