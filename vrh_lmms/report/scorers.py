"""The scorer comparison (the paper's Fig 2 / Table A9 and Fig 3): at each k, accuracy with the top-k of each
scoring cell masked, beside the primary cell's top-k and the random draws, as one table and one plot.

Input: a group's configuration blocks (vrh_lmms.report.analysis) from a sweep with `--compare-cells`
(`scorer_topk` configurations carry their cell). Each cell is labelled with the prior methods whose preset it is
(vrh_lmms.runs.discovery.scoring.PRESETS): Retrieval Heads and OCR Heads share `out,argmax,mean`, so they share a row.
"""

from __future__ import annotations

from pathlib import Path
from statistics import mean
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.escape import md
from vrh_lmms.base.paths import shown_model
from vrh_lmms.report.fmt import pct
from vrh_lmms.report.plots import legend_outside
from vrh_lmms.runs.discovery.scoring import PRESETS

PRIMARY = "primary"


def cell_label(cell: str) -> str:
    """`in,sum,mean` -> `in,sum,mean (qrhead)`: the cell with the presets that name it."""
    names = [name for name, c in PRESETS.items() if c == cell and name != cell]
    return f"{cell} ({', '.join(names)})" if names else cell


def scorer_block(group: dict, primary_cell: str | None) -> dict[str, Any] | None:
    """Rows of {label, cell, by_k: {k: accuracy block + drop}} for the primary cell, each compared cell and the
    random draws' mean; None when the group has no scorer configurations."""
    configs = [c for c in group["configs"] if c["heads_source"] is None and c["mode"] in ("zero", None)]
    scorers = [c for c in configs if c["kind"] == "scorer_topk"]
    if not scorers:
        return None
    ks = sorted({c["k"] for c in scorers})

    def entry(c: dict) -> dict:
        return {"acc": c["accuracy"]["mean"], "ci": [c["accuracy"]["ci_low"], c["accuracy"]["ci_high"]],
                "drop": (c.get("drop") or {}).get("drop"), "p": (c.get("test") or {}).get("pvalue")}

    # by_k keys are strings, as they read back from report.json
    primary = {str(c["k"]): entry(c) for c in configs if c["kind"] == "topk" and c["k"] in ks}
    rows = [{"label": f"{cell_label(primary_cell or PRIMARY)} [primary]", "cell": primary_cell, "by_k": primary}]
    for cell in sorted({c["cell"] for c in scorers}):
        rows.append({"label": cell_label(cell), "cell": cell,
                     "by_k": {str(c["k"]): entry(c) for c in scorers if c["cell"] == cell}})
    randoms = {}
    for k in ks:
        draws = [c["accuracy"]["mean"] for c in configs if c["kind"] == "random" and c["k"] == k]
        if draws:
            randoms[str(k)] = {"acc": mean(draws), "ci": [min(draws), max(draws)], "drop": None, "p": None,
                          "n_draws": len(draws)}
    if randoms:
        rows.append({"label": "random (mean of draws; range)", "cell": None, "by_k": randoms})
    base = group["baseline"]["accuracy"]["mean"] if group["baseline"] else None
    return {"model": group["model"], "task": group["task"], "ks": ks, "baseline": base, "rows": rows}


def scorers_markdown(blocks: list[dict]) -> list[str]:
    if not blocks:
        return []
    out = ["## Scoring cells compared (paper Fig 2 / Table A9, Fig 3)", "",
           "Accuracy with each cell's top-k heads masked (lower: the cell found heads the task needs), the primary "
           "cell's top-k and the random draws beside them; in brackets the cluster-adjusted 95% interval (random: the "
           "range over draws).", ""]
    for b in blocks:
        out += [f"**{md(shown_model(b['model']))} / {md(b['task'])}** (baseline {pct(b['baseline'])})", "",
                "| Scorer | " + " | ".join(f"k = {k}" for k in b["ks"]) + " |",
                "|---|" + "---|" * len(b["ks"])]
        for row in b["rows"]:
            cells = []
            for k in b["ks"]:
                e = row["by_k"].get(str(k))
                cells.append("—" if e is None else f"{pct(e['acc'])} [{pct(e['ci'][0])}, {pct(e['ci'][1])}]")
            out.append(f"| {md(row['label'])} | " + " | ".join(cells) + " |")
        out.append("")
    return out


def scorers_plot(block: dict, path: Path) -> Path:
    """Accuracy vs k, one line per scorer, random as a dashed line with its range."""
    if not any(str(k) in row["by_k"] for row in block["rows"] for k in block["ks"]):
        raise VRHError(f"scorer comparison of {block['model']} / {block['task']}: no accuracy at any k to plot")

    fig, ax = plt.subplots(figsize=(6.5, 5), layout="constrained")
    if block["baseline"] is not None:
        ax.axhline(100 * block["baseline"], color="0.3", ls=":", label="baseline")
    for row in block["rows"]:
        ks = [k for k in block["ks"] if str(k) in row["by_k"]]
        accs = [100 * row["by_k"][str(k)]["acc"] for k in ks]  # percent, as the tables
        if row["cell"] is None:
            ax.plot(ks, accs, "--", color="tab:blue", label=row["label"])
            ax.fill_between(ks, [100 * row["by_k"][str(k)]["ci"][0] for k in ks],
                            [100 * row["by_k"][str(k)]["ci"][1] for k in ks], color="tab:blue", alpha=0.15)
        else:
            ax.plot(ks, accs, "o-", lw=2.2 if "[primary]" in row["label"] else 1.3, label=row["label"])
    ax.set_xlabel("k (heads masked)")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    ax.set_xticks(block["ks"])
    ax.set_title(f"Scorers compared: {block['model'].rsplit('/', 1)[-1]} / {block['task']}", fontsize=10)
    legend_outside(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
