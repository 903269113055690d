"""The distribution of head scores (`vrh-lmms score-distribution`; the paper's Fig 5): per heads file, the share of
heads scoring above each threshold (the paper's 1e-3 and 5e-3), with the quantiles behind a sorted-score plot.

The paper's Fig 5 reads those shares for its models, but the protocol summary shipped with this project
(paper-protocol.md) transcribes only the thresholds, not the shares: there is no paper value to print beside ours.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.escape import md
from vrh_lmms.base.heads.geometry import head_name
from vrh_lmms.base.stats.distribution import share_above
from vrh_lmms.report.head_compare import HeadScores

SCHEMA = "vrh-score-distribution/1"
PAPER_THRESHOLDS = (1e-3, 5e-3)
PAPER_NOTE = ("The paper's Fig 5 gives the share of heads above 1e-3 and 5e-3 for its models; the protocol summary "
              "shipped here (paper-protocol.md) names only the thresholds, not the shares, so no paper value is shown.")


def distribution(items: list[HeadScores], thresholds: list[float]) -> dict[str, Any]:
    """distribution.json's content: shares above each threshold, and summary quantiles, per input."""
    if not thresholds:
        raise VRHError("--thresholds: give at least one threshold, e.g. 1e-3,5e-3")
    rows = []
    for item in items:
        if item.scores is None:
            raise VRHError(f"{item.source}: a published list ranks heads and carries no scores; a score "
                           f"distribution needs a heads file written by `vrh-lmms discover`")
        flat = np.asarray(item.scores, dtype=float).ravel()
        shares = share_above(flat, thresholds)
        rows.append({"label": item.label, "source": item.source, "cell": item.cell, "heads": int(flat.size),
                     "above": {f"{t:g}": shares[t] for t in thresholds},
                     "count_above": {f"{t:g}": int(np.count_nonzero(flat > t)) for t in thresholds},
                     "non_positive": int(np.count_nonzero(~(flat > 0))),
                     "max": float(np.nanmax(flat)), "median": float(np.nanmedian(flat)),
                     "quantiles": {q: float(np.nanquantile(flat, float(q))) for q in ("0.5", "0.9", "0.98", "0.99")},
                     "live": _live_shares(item, thresholds)})
    return {"schema": SCHEMA, "thresholds": [float(t) for t in thresholds], "inputs": rows, "paper": PAPER_NOTE}


def _live_shares(item: HeadScores, thresholds: list[float]) -> dict[str, Any] | None:
    """The shares among the heads that write something, where the file records heads that write nothing (a pruned
    head attends uniformly, so its score is the keys' average box share, not a retrieval score); None otherwise."""
    if not item.dead:
        return None
    live = np.array([[head_name(layer, head) not in item.dead for head in range(item.heads)]
                     for layer in range(item.layers)])
    scores = np.asarray(item.scores, dtype=float)[live]
    shares = share_above(scores, thresholds)
    return {"heads": int(live.sum()), "above": {f"{t:g}": shares[t] for t in thresholds}}


def distribution_markdown(block: dict[str, Any], plot_name: str | None = None) -> str:
    keys = [f"{t:g}" for t in block["thresholds"]]
    lines = ["# Distribution of head scores", ""]
    for r in block["inputs"]:
        shares = "; ".join(f"{100 * r['above'][k]:.1f}% ({r['count_above'][k]} of {r['heads']}) above {k}"
                           for k in keys)
        lines.append(f"- {md(r['label'])} ({md(r['cell'])}): {shares}; median score {r['median']:.2g}, highest "
                     f"{r['max']:.3g}.")
    lines += ["", "| input | cell | heads | " + " | ".join(f"share above {k}" for k in keys) +
              " | median | 99th percentile | max |", "|---|---|---|" + "---|" * (len(keys) + 3)]
    for r in block["inputs"]:
        lines.append(f"| {md(r['label'])} | {md(r['cell'])} | {r['heads']} | " +
                     " | ".join(f"{100 * r['above'][k]:.1f}%" for k in keys) +
                     f" | {r['median']:.3g} | {r['quantiles']['0.99']:.3g} | {r['max']:.3g} |")
    live = [r for r in block["inputs"] if r.get("live")]
    if live:
        lines += ["", "Among the heads that write something (the files list heads whose o_proj columns are zero):", "",
                  "| input | live heads | " + " | ".join(f"share above {k}" for k in keys) + " |",
                  "|---|---|" + "---|" * len(keys)]
        for r in live:
            lines.append(f"| {md(r['label'])} | {r['live']['heads']} | " +
                         " | ".join(f"{100 * r['live']['above'][k]:.1f}%" for k in keys) + " |")
    lines += ["", block["paper"]]
    if any(r["non_positive"] for r in block["inputs"]):
        lines.append("Scores at or below zero (e.g. after `--null-query` calibration) are counted in the shares but "
                     "cannot be drawn on the log scale.")
    if plot_name:
        lines += ["", f"![score distribution]({plot_name})"]
    return "\n".join(lines) + "\n"
