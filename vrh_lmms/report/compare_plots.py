"""Figures of `vrh-lmms compare-heads` and `vrh-lmms score-distribution` (Agg backend, PNG): layer x head score maps
side by side with each input's top-k marked (and the top-k overlap matrix for three inputs or more; the paper's
Fig 7), and the sorted head scores on a log scale with the share thresholds (the paper's Fig 5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

from vrh_lmms.base.heads.geometry import parse_head
from vrh_lmms.report.head_compare import HeadScores


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _score_map(ax, fig, item: HeadScores, k: int) -> None:
    if item.scores is None:  # a published list: its ranks, best = k
        grid = np.zeros(item.grid)
        for rank, name in enumerate(item.ranking):
            h = parse_head(name)
            grid[h.layer, h.head] = len(item.ranking) - rank
        im, label = ax.imshow(grid, aspect="auto", origin="lower", cmap="viridis"), "published rank (no scores)"
    else:
        im, label = ax.imshow(item.scores, aspect="auto", origin="lower", cmap="viridis"), f"score ({item.cell})"
    fig.colorbar(im, ax=ax, label=label, fraction=0.05)
    top = [parse_head(n) for n in item.ranking[:k]]
    ax.scatter([h.head for h in top], [h.layer for h in top], s=28, facecolors="none", edgecolors="red",
               linewidths=1.2, label=f"top-{k}")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(item.label, fontsize=9)
    ax.legend(fontsize=7, loc="upper right")


def score_maps_plot(items: list[HeadScores], block: dict[str, Any], path: Path) -> Path:
    """One score map per input; for two inputs the title gives overlap and Spearman, for more a matrix panel."""
    k = block["k"]
    n = len(items)
    panels = n + (1 if n >= 3 else 0)
    cols = 2 if panels == 4 else min(panels, 3)
    rows = -(-panels // cols)
    fig, grid = plt.subplots(rows, cols, figsize=(4.6 * cols, 4.2 * rows), squeeze=False)
    axes = list(grid.ravel())
    for ax in axes[panels:]:
        ax.set_visible(False)
    for ax, item in zip(axes, items, strict=False):
        _score_map(ax, fig, item, k)
    if n == 2:
        p = block["pairs"][0]
        rho = "n/a" if p["spearman"] is None else f"{p['spearman']:.3f}"
        chance = "" if p["chance"] is None else f" (chance {p['chance']:.2f})"
        fig.suptitle(f"top-{k} overlap {p['overlap']} / {k}{chance}; Spearman {rho}", fontsize=10)
    else:
        ax = axes[panels - 1]
        mat = np.asarray(block["overlap_matrix"])
        ax.imshow(mat, vmin=0, vmax=k, cmap="magma")
        for i in range(n):
            for j in range(n):
                ax.text(j, i, str(mat[i, j]), ha="center", va="center", fontsize=8,
                        color="w" if mat[i, j] < 0.6 * k else "k")
        labels = [i.label for i in items]
        ax.set_xticks(range(n), labels, rotation=60, ha="right", fontsize=7)
        ax.set_yticks(range(n), labels, fontsize=7)
        ax.set_title(f"top-{k} overlap (heads in common)", fontsize=9)
    return _save(fig, path)


def distribution_plot(items: list[HeadScores], thresholds: list[float], path: Path) -> Path:
    """Sorted scores against the share of heads (log y; non-positive scores cannot be drawn and are left out) and
    a histogram of log10 score, with the thresholds as lines."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    positives = []
    for item in items:
        flat = np.sort(np.asarray(item.scores, dtype=float).ravel())[::-1]
        share = (np.arange(flat.size) + 1) / flat.size
        keep = flat > 0
        left.plot(share[keep], flat[keep], label=item.label, lw=1.4)
        positives.append(flat[keep])
    for t in thresholds:
        left.axhline(t, color="0.4", ls="--", lw=0.8)
        right.axvline(np.log10(t), color="0.4", ls="--", lw=0.8)
    left.set_yscale("log")
    left.set_xlabel("share of heads (sorted by score)")
    left.set_ylabel("score")
    left.set_title("sorted head scores (dashed: thresholds)", fontsize=9)
    left.legend(fontsize=7)
    pooled = np.concatenate(positives) if positives else np.array([])
    if pooled.size:
        bins = np.linspace(np.log10(pooled.min()), np.log10(pooled.max()) + 1e-9, 30)
        for item, pos in zip(items, positives, strict=True):
            right.hist(np.log10(pos), bins=bins, histtype="step", lw=1.4, label=item.label)
    right.set_xlabel("log10 score")
    right.set_ylabel("heads")
    right.set_title("histogram of positive scores", fontsize=9)
    return _save(fig, path)
