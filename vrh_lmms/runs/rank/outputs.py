"""`vrh-lmms rank` outputs: rank.json (every figure, every query's gold rank per head set), rank.md (the tables with
their intervals) and rank.png (Recall@1 and MRR per head set with intervals), each written atomically."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vrh_lmms.base import atomic
from vrh_lmms.base.escape import md
from vrh_lmms.base.owned import json_with
from vrh_lmms.runs.runner import result_layout

RESULT = "rank.json"
TABLE = "rank.md"
PLOT = "rank.png"
SCHEMA = "vrh-rank/1"
# what `vrh-lmms rank` writes into its folder (vrh_lmms.runs.runner.result_layout)
LAYOUT = result_layout(json_with("results", schema_prefix="vrh-rank/"), RESULT, TABLE, PLOT)


def _ci(m: dict[str, Any]) -> str:
    return f"{100 * m['mean']:.1f} [{100 * m['ci_low']:.1f}, {100 * m['ci_high']:.1f}]"


def _d(d: dict[str, float]) -> str:
    return f"{100 * d['diff']:+.1f} [{100 * d['ci_low']:+.1f}, {100 * d['ci_high']:+.1f}]"


def table_rows(block: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(head set, Recall@1, Recall@5, MRR, paired Recall@1 difference) per row, percent with 95% intervals."""
    rows = []
    for row in block["rows"]:
        k, t = row["k"], row["topk"]
        rows.append((f"top-{k}", _ci(t["recall@1"]), _ci(t["recall@5"]), _ci(t["mrr"]),
                     f"top-{k} minus all: {_d(row['topk_minus_all']['recall@1'])}"))
        if "random" in row:
            r = row["random"]
            seeds = r["per_seed_recall@1"]
            name = f"random-{k} ({r['draws']} draws, each {100 * min(seeds):.0f}-{100 * max(seeds):.0f})"
            rows.append((name, _ci(r["recall@1"]), _ci(r["recall@5"]), _ci(r["mrr"]),
                         f"top-{k} minus random-{k}: {_d(row['topk_minus_random']['recall@1'])}"))
    a = block["all"]
    rows.append((f"all live heads ({block['n_all']})", _ci(a["recall@1"]), _ci(a["recall@5"]), _ci(a["mrr"]), ""))
    return rows


def markdown(data: dict[str, Any]) -> str:
    lines = [f"# Ranker: {md(data['data'])}", "",
             f"{data['n_queries']} queries over {data['n_sets']} candidate sets ({data['candidates']} candidates "
             f"per set); query row: {md(data['query_row'])}; intervals 95%, clustered by candidate set "
             f"(Recall@k: design-effect Wilson; MRR and random-k shares: cluster-robust t). Percent.", ""]
    for scoring in ("calibrated", "raw"):
        title = "null-question calibrated (query minus 'N/A' mass)" if scoring == "calibrated" else "raw mass"
        lines += [f"## {title}", "", "| head set | Recall@1 | Recall@5 | MRR | paired difference, Recall@1 |",
                  "|---|---|---|---|---|"]
        lines += [f"| {' | '.join(r)} |" for r in table_rows(data["results"][scoring])]
        lines.append("")
    lines.append(f"Chance Recall@1: {100 * data['chance_recall@1']:.1f}.")
    return "\n".join(lines) + "\n"


def plot(data: dict[str, Any], path: Path) -> Path:
    # deferred: keeps `vrh-lmms rank --help` free of matplotlib
    import matplotlib

    matplotlib.use("Agg")
    # deferred: keeps `vrh-lmms rank --help` free of matplotlib
    import matplotlib.pyplot as plt

    block = data["results"]["calibrated"]
    names, stats = [], []
    for row in block["rows"]:
        names.append(f"top-{row['k']}")
        stats.append(row["topk"])
        if "random" in row:
            names.append(f"random-{row['k']}")
            stats.append(row["random"])
    names.append("all live")
    stats.append(block["all"])
    fig, axes = plt.subplots(1, 2, figsize=(4 + 1.2 * len(names), 3.6))
    for ax, metric in zip(axes, ("recall@1", "mrr")):
        means = [100 * s[metric]["mean"] for s in stats]
        err = [[m - 100 * s[metric]["ci_low"] for m, s in zip(means, stats)],
               [100 * s[metric]["ci_high"] - m for m, s in zip(means, stats)]]
        ax.bar(range(len(names)), means, yerr=err, capsize=4, color="#4c72b0")
        if metric == "recall@1":
            ax.axhline(100 * data["chance_recall@1"], color="grey", linestyle="--", label="chance")
            ax.legend(loc="upper right", fontsize=8)
        ax.set_xticks(range(len(names)), names, rotation=20, fontsize=8)
        ax.set_ylabel(f"{'Recall@1' if metric == 'recall@1' else 'MRR'} (%, 95% CI)")
        ax.set_ylim(0, 100)
    fig.suptitle(f"Ranker (calibrated), {data['n_queries']} queries", fontsize=10)
    fig.tight_layout()
    with atomic.atomic_file(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return path


def write(data: dict[str, Any], output: Path) -> tuple[Path, Path, Path]:
    """Plot and table first, the JSON last (its presence means the run finished)."""
    png = plot(data, output / PLOT)
    md = atomic.write_text(output / TABLE, markdown(data))
    js = atomic.write_text(output / RESULT, json.dumps({"schema": SCHEMA, **data}, indent=1))
    return js, md, png
