"""Matplotlib figures (Agg backend, PNG): k-sweep curves, drop bars, failure taxonomy, head-score heatmaps and the
top-k overlap matrix. Each function takes report.json blocks, so a figure never shows a number the JSON lacks."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from vrh_lmms.report.heads_files import HeadsFile

_COLORS = {"baseline": "0.3", "topk": "tab:red", "random": "tab:blue", "layer_matched": "tab:green",
           "image_matched": "tab:olive", "random_all": "tab:cyan", "random_outside": "tab:brown",
           "explicit": "tab:purple"}
_STATUS_COLORS = {"correct": "tab:green", "mislocated": "tab:orange", "wrong": "tab:orange",
                  "parse_failure": "tab:gray"}


def slug(*parts: str) -> str:
    text = "_".join(p.split("/")[-1] for p in parts if p)
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "plot"


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


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
    fig, ax = plt.subplots(figsize=(6, 4))
    base = group["baseline"]
    if base is not None:
        acc = base["accuracy"]
        ax.axhline(acc["mean"], color=_COLORS["baseline"], ls="--", label="baseline")
        ax.axhspan(acc["ci_low"], acc["ci_high"], color=_COLORS["baseline"], alpha=0.12)
    ks = list(tops)
    top = [tops[k][0]["accuracy"] for k in ks]
    names = {(tops[k][0]["heads_label"] or "").partition(" ")[2] for k in ks}
    name = "top-k " + names.pop() if len(names) == 1 and "" not in names else "top-k"
    ax.plot(ks, [a["mean"] for a in top], "o-", color=_COLORS["topk"], label=f"{name} (cluster-adjusted Wilson CI)")
    ax.fill_between(ks, [a["ci_low"] for a in top], [a["ci_high"] for a in top], color=_COLORS["topk"], alpha=0.2)
    for kind, name in (("random", "random-k"), ("random_all", "uniform random-k (all heads)"),
                       ("random_outside", "random-k outside the top-k"),
                       ("layer_matched", "layer-matched random-k"), ("image_matched", "image-matched")):
        pools = _by_k(configs, kind, mode)
        if not pools:
            continue
        xs = list(pools)
        accs = [np.array([c["accuracy"]["mean"] for c in pools[k]]) for k in xs]
        means = np.array([a.mean() for a in accs])
        lows, highs = np.array([a.min() for a in accs]), np.array([a.max() for a in accs])
        # identical draws (e.g. five at 0.87) average to a hair off their min and max: clip the rounding
        ax.errorbar(xs, means, yerr=np.clip([means - lows, highs - means], 0, None), fmt="s-", color=_COLORS[kind],
                    capsize=3, label=f"{name} (mean, min-max over seeds)")
        if len(xs) > 1:
            ax.fill_between(xs, lows, highs, color=_COLORS[kind], alpha=0.15)
    ax.set_xticks(sorted({c["k"] for c in configs if c["k"] is not None and c["heads_source"] is None}))
    ax.set_xlabel("k (heads masked)")
    ax.set_ylabel(group["metric"])
    ax.set_title(f"{group['model'].split('/')[-1]} / {group['task']} ({mode})", fontsize=9)
    ax.legend(fontsize=7)
    return _save(fig, path)


def drop_plot(group: dict, path: Path) -> Path | None:
    """Drop vs baseline per configuration with its cluster-aware CI (the one report.md prints)."""
    rows = [c for c in group["configs"] if c["drop"] is not None]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(max(4, 0.45 * len(rows) + 2), 4))
    x = np.arange(len(rows))
    drops = np.array([c["drop"]["drop"] for c in rows])
    err = np.array([[d - c["drop"]["ci_low"] for d, c in zip(drops, rows, strict=True)],
                    [c["drop"]["ci_high"] - d for d, c in zip(drops, rows, strict=True)]])
    ax.bar(x, drops, color=[_COLORS.get(c["kind"], "0.5") for c in rows])
    ax.errorbar(x, drops, yerr=np.clip(err, 0, None), fmt="none", ecolor="k", capsize=3, lw=1)
    ax.axhline(0, color="k", lw=0.6)
    ax.set_xticks(x, [c["label"] for c in rows], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel(f"drop in {group['metric']} vs baseline")
    ax.set_title(f"{group['model'].split('/')[-1]} / {group['task']}", fontsize=9)
    return _save(fig, path)


def taxonomy_plot(group: dict, path: Path) -> Path | None:
    """Stacked fractions of correct / mislocated (or wrong) / parse failure, baseline first."""
    rows = ([group["baseline"]] if group["baseline"] else []) + group["configs"]
    rows = [r for r in rows if r["taxonomy"] is not None]
    if not rows:
        return None
    statuses = list(rows[0]["taxonomy"]["fractions"])
    fig, ax = plt.subplots(figsize=(max(4, 0.45 * len(rows) + 2), 4))
    x = np.arange(len(rows))
    bottom = np.zeros(len(rows))
    for status in statuses:
        vals = np.array([r["taxonomy"]["fractions"][status] for r in rows])
        ax.bar(x, vals, bottom=bottom, color=_STATUS_COLORS.get(status, "0.5"), label=status.replace("_", " "))
        bottom += vals
    ax.set_xticks(x, ["baseline" if r["kind"] == "baseline" else r["label"] for r in rows],
                  rotation=60, ha="right", fontsize=7)
    ax.set_ylim(0, 1)
    ax.set_ylabel("fraction of samples")
    ax.set_title(f"{group['model'].split('/')[-1]} / {group['task']}", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
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
