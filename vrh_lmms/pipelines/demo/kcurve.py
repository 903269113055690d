"""The demo's k-curve plot: top-k, random-k and layer-matched random-k drops against k (means with min-max bands).

The k-curve protocol that computes such curves with a causal oracle on the demo model is research
(research/demo_model/kcurve.py); the demo draws its curve from its sweep's samples.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from vrh_lmms.base.heads import kinds
from vrh_lmms.report.plots import DPI, legend_outside


def control_series(rows: list[dict], pool: str = "") -> list[tuple[str, str]]:
    """(kind, legend label) of each control series the k-curve draws: the control kinds the rows hold
    (`<kind>_drops`), in their order, with draws at some k; `pool` (the run's pool) leads the label of the kinds
    without a pool of their own (uniform over all heads has its own)."""
    lead = f"{pool} " if pool else ""
    shown = [kinds.BY_NAME[key[:-len("_drops")]] for key in (rows[0] if rows else {})
             if key.endswith("_drops") and key[:-len("_drops")] in kinds.BY_NAME]
    return [(k.name, k.legend if k.pool else lead + k.legend) for k in shown
            if any(r.get(f"{k.name}_drops") for r in rows)]


def plot_k_curve(result: dict, path, title: str, pool: str = "") -> None:
    """Top-k, oracle-k and control drops against k (means with min-max bands); `pool` (the run's pool) names what the
    control draws without a pool of their own came from in the legend."""

    rows = result["rows"]
    ks = [r["k"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4.4), layout="constrained")
    ax.plot(ks, [r["top_drop"] for r in rows], "o-", color="C3", label="top-k (scorer)")
    if rows and "oracle_drop" in rows[0]:
        ax.plot(ks, [r["oracle_drop"] for r in rows], "s--", color="C1", label="oracle-k (single-head effect)")
    for kind, label in control_series(rows, pool):
        colour = kinds.BY_NAME[kind].colour
        kept = [r for r in rows if r.get(f"{kind}_drops")]
        d = np.array([r[f"{kind}_drops"] for r in kept])
        x = [r["k"] for r in kept]
        ax.plot(x, d.mean(1), "^-", color=colour, label=f"{label} (mean of {d.shape[1]})")
        ax.fill_between(x, d.min(1), d.max(1), color=colour, alpha=0.15)
    total = result.get("total_heads", result["layers"] * result["heads"])  # a hybrid: only its attention layers
    ax.axvline(0.10 * total, color="grey", lw=0.8, ls=":", label=f"10% of the heads (k = {0.10 * total:g})")
    ax.set_xlabel(f"k (heads ablated, of {total})")
    ax.set_ylabel("accuracy drop (points)")
    ax.set_title(title, fontsize=9)
    legend_outside(fig)  # under the axes: inside, it covered the top-k point at k = 9
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
