"""Matplotlib figures (Agg backend, PNG): k-sweep curves, drop bars, failure taxonomy, head-score heatmaps and the
top-k overlap matrix. Each function takes report.json blocks, so a figure never shows a number the JSON lacks."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from vrh_lmms.base.heads.kinds import KINDS
from vrh_lmms.report.heads_files import HeadsFile

_COLORS = {k.name: k.colour for k in KINDS if k.colour}  # vrh_lmms.base.heads.kinds
_STATUS_COLORS = {"correct": "tab:green", "mislocated": "tab:orange", "wrong": "tab:orange",
                  "parse_failure": "tab:gray"}


def slug(*parts: str) -> str:
    text = "_".join(p.split("/")[-1] for p in parts if p)
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "plot"


# Sized for a page: a report shows each PNG at its width up to about 1,200 px, so a figure never grows past
# MAX_WIDTH_IN inches at DPI (1,536 px); a bar chart with more bars than fit wraps onto more rows of panels.
DPI = 120
MAX_WIDTH_IN = 12.8
BAR_IN = 0.45  # width per bar (its rotated label fits)
BARS_PER_ROW = int((MAX_WIDTH_IN - 2) / BAR_IN)


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def legend_outside(fig, where: str = "lower center", ncols: int = 1) -> None:
    """One legend for the figure, outside every axes (`outside lower center`: under the plot), so it never covers a
    data point; the figure must use the constrained layout, which makes room for it."""
    handles, labels = [], []
    for ax in fig.axes:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(h)
                labels.append(label)
    if handles:
        fig.legend(handles, labels, loc=f"outside {where}", ncols=ncols, fontsize=7, frameon=False)


def _bar_panels(n: int, height: float = 4.0):
    """A figure for n bars: one row of panels while they fit MAX_WIDTH_IN, else rows of BARS_PER_ROW bars sharing
    the y axis. Returns the figure and, per panel, its axes and the slice of bars it shows."""
    rows = max(1, -(-n // BARS_PER_ROW))
    per_row = -(-n // rows)  # balanced rows: 65 bars are 22 + 22 + 21, not 26 + 26 + 13
    fig, axes = plt.subplots(rows, 1, figsize=(max(4, BAR_IN * per_row + 2), height * rows), sharey=True,
                             squeeze=False, layout="constrained")
    return fig, [(ax, slice(i * per_row, min(n, (i + 1) * per_row))) for i, ax in enumerate(axes[:, 0])]


def _by_k(configs: list[dict], kind: str, mode: str) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for c in configs:
        if c["kind"] == kind and c["mode"] == mode and c["heads_source"] is None and c["k"] is not None:
            out.setdefault(c["k"], []).append(c)
    return dict(sorted(out.items()))


def ksweep_plot(group: dict, mode: str, path: Path) -> Path | None:
    """Accuracy vs k: top-k with its cluster-adjusted Wilson band, random-k / layer-matched / image-matched mean with
    the min-max band over seeds."""
    configs = group["configs"]
    tops = _by_k(configs, "topk", mode)
    if not tops:
        return None
    fig, ax = plt.subplots(figsize=(6, 4.8), layout="constrained")
    base = group["baseline"]
    if base is not None:
        acc = base["accuracy"]
        ax.axhline(100 * acc["mean"], color=_COLORS["baseline"], ls="--", label="baseline")
        ax.axhspan(100 * acc["ci_low"], 100 * acc["ci_high"], color=_COLORS["baseline"], alpha=0.12)
    ks = list(tops)
    top = [tops[k][0]["accuracy"] for k in ks]
    names = {(tops[k][0]["heads_label"] or "").partition(" ")[2] for k in ks}
    name = "top-k " + names.pop() if len(names) == 1 and "" not in names else "top-k"
    ax.plot(ks, [100 * a["mean"] for a in top], "o-", color=_COLORS["topk"],
            label=f"{name} (cluster-adjusted Wilson CI)")
    ax.fill_between(ks, [100 * a["ci_low"] for a in top], [100 * a["ci_high"] for a in top], color=_COLORS["topk"],
                    alpha=0.2)
    for kind, name in ((k.name, k.legend) for k in KINDS if k.control):
        pools = _by_k(configs, kind, mode)
        if not pools:
            continue
        xs = list(pools)
        accs = [100 * np.array([c["accuracy"]["mean"] for c in pools[k]]) for k in xs]
        means = np.array([a.mean() for a in accs])
        lows, highs = np.array([a.min() for a in accs]), np.array([a.max() for a in accs])
        # identical draws (e.g. five at 0.87) average to a hair off their min and max: clip the rounding
        ax.errorbar(xs, means, yerr=np.clip([means - lows, highs - means], 0, None), fmt="s-", color=_COLORS[kind],
                    capsize=3, label=f"{name} (mean, min-max over seeds)")
        if len(xs) > 1:
            ax.fill_between(xs, lows, highs, color=_COLORS[kind], alpha=0.15)
    ax.set_xticks(sorted({c["k"] for c in configs if c["k"] is not None and c["heads_source"] is None}))
    ax.set_xlabel("k (heads masked)")
    ax.set_ylabel(f"{group['metric']} (%)")
    ax.set_title(f"{group['model'].split('/')[-1]} / {group['task']} ({mode})", fontsize=9)
    legend_outside(fig)
    return _save(fig, path)


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def drop_plot(group: dict, path: Path) -> Path | None:
    """Drop vs baseline per configuration with its cluster-aware CI (the one report.md prints)."""
    rows = [c for c in group["configs"] if c["drop"] is not None]
    if not rows:
        return None
    fig, panels = _bar_panels(len(rows))
    for ax, part in panels:
        shown = rows[part]
        x = np.arange(len(shown))
        drops = np.array([100 * c["drop"]["drop"] for c in shown])
        # an interval that could not be computed (null: a doc subset of one image) gets no bar
        err = np.array([[d - 100 * _or(c["drop"]["ci_low"], d / 100) for d, c in zip(drops, shown, strict=True)],
                        [100 * _or(c["drop"]["ci_high"], d / 100) - d for d, c in zip(drops, shown, strict=True)]])
        ax.bar(x, drops, color=[_COLORS.get(c["kind"], "0.5") for c in shown])
        ax.errorbar(x, drops, yerr=np.clip(err, 0, None), fmt="none", ecolor="k", capsize=3, lw=1)
        ax.axhline(0, color="k", lw=0.6)
        ax.set_xticks(x, [c["label"] for c in shown], rotation=60, ha="right", fontsize=7)
        ax.set_xlim(-0.6, len(shown) - 0.4)
        ax.set_ylabel(f"drop in {group['metric']} (points)")
    panels[0][0].set_title(f"{group['model'].split('/')[-1]} / {group['task']}", fontsize=9)
    return _save(fig, path)


def taxonomy_plot(group: dict, path: Path) -> Path | None:
    """Stacked fractions of correct / mislocated (or wrong) / parse failure, baseline first."""
    rows = ([group["baseline"]] if group["baseline"] else []) + group["configs"]
    rows = [r for r in rows if r["taxonomy"] is not None]
    if not rows:
        return None
    statuses = list(rows[0]["taxonomy"]["fractions"])
    fig, panels = _bar_panels(len(rows))
    for ax, part in panels:
        shown = rows[part]
        x = np.arange(len(shown))
        bottom = np.zeros(len(shown))
        for status in statuses:
            vals = np.array([100 * r["taxonomy"]["fractions"][status] for r in shown])
            ax.bar(x, vals, bottom=bottom, color=_STATUS_COLORS.get(status, "0.5"), label=status.replace("_", " "))
            bottom += vals
        ax.set_xticks(x, ["baseline" if r["kind"] == "baseline" else r["label"] for r in shown],
                      rotation=60, ha="right", fontsize=7)
        ax.set_xlim(-0.6, len(shown) - 0.4)
        ax.set_ylim(0, 100)
        ax.set_ylabel("samples (%)")
    panels[0][0].set_title(f"{group['model'].split('/')[-1]} / {group['task']}", fontsize=9)
    legend_outside(fig, "upper right", ncols=1)
    return _save(fig, path)


def heads_heatmap(heads: HeadsFile, k: int, path: Path) -> Path:
    """Layer x head scores of a heads file; dots mark its top-k heads."""
    layers, n_heads = heads.scores.shape
    fig, ax = plt.subplots(figsize=(min(12, 2 + 0.25 * n_heads), min(10, 1.5 + 0.22 * layers)))
    im = ax.imshow(heads.scores, aspect="auto", origin="lower", cmap="viridis")
    fig.colorbar(im, ax=ax, label="score")
    pts = [re.match(r"^L(\d+)H(\d+)$", h) for h in heads.ranking[:k]]
    pts = [(int(m[1]), int(m[2])) for m in pts if m]
    if pts:
        ax.scatter([h for _, h in pts], [layer for layer, _ in pts], s=12, c="red", label=f"top-{k}")
        ax.legend(fontsize=7, loc="upper right")
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(f"{heads.model.split('/')[-1]} ({heads.path.name})", fontsize=9)
    return _save(fig, path)


def overlap_plot(labels: list[str], matrix: list[list[float]], k: int, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(2 + 0.8 * len(labels), 1.5 + 0.8 * len(labels)))
    mat = np.asarray(matrix)
    ax.imshow(mat, vmin=0, vmax=1, cmap="magma")
    for i in range(mat.shape[0]):
        for j in range(mat.shape[1]):
            ax.text(j, i, f"{mat[i, j]:.2f}", ha="center", va="center", fontsize=7,
                    color="w" if mat[i, j] < 0.6 else "k")
    ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.set_title(f"top-{k} Jaccard overlap", fontsize=9)
    return _save(fig, path)
