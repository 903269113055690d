"""The kv-cache table: accuracy per (policy, budget) with image-clustered intervals, the paired drop against no
compression, the image KV and cache bytes kept; written as kv_cache.json, kv_cache.md and the curve kv_cache.png.

Random draws are pooled per doc (the mean outcome of the seeds, a bounded score), so their interval is over docs
for these draws; the single draws' range is given beside it.
"""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.escape import md, md_code
from vrh_lmms.base.paths import shown_model, shown_path
from vrh_lmms.base.stats.accuracy import accuracy, is_binary
from vrh_lmms.base.stats.drop import paired_drop
from vrh_lmms.runs.kvcache.evaluate import RunOutcome

SCHEMA = "vrh-kv-cache/1"


def _aligned(base: RunOutcome, other: RunOutcome) -> np.ndarray:
    if other.doc_keys != base.doc_keys:
        raise VRHError(f"run {other.name} scored other docs than the uncompressed run; evaluate them alike")
    return other.scores


def _acc(values: np.ndarray, clusters: list[str]) -> dict[str, Any]:
    quantity = "binary" if is_binary(values) else ("bounded" if values.min() >= 0 and values.max() <= 1
                                                    else "unbounded")
    r = accuracy(values, clusters, quantity=quantity)
    return {"mean": r.mean, "ci_low": r.ci_low, "ci_high": r.ci_high, "method": r.method, "n": r.n,
            "n_clusters": r.n_clusters}


def _drop(base: np.ndarray, other: np.ndarray, clusters: list[str], seed: int) -> dict[str, Any]:
    d = paired_drop(base, other, clusters, seed=seed, bootstrap=False)
    return {"drop": d.drop, "ci_low": d.ci_low, "ci_high": d.ci_high}


def _cache_mean(runs: list[RunOutcome]) -> dict[str, float]:
    keys = set.intersection(*(set(r.cache) for r in runs)) if runs else set()
    return {k: float(np.mean([r.cache[k] for r in runs])) for k in sorted(keys)}


def table(runs: list[RunOutcome], budgets: list[float], seed: int = 0) -> dict[str, Any]:
    """Rows per (budget, policy) from the evaluated runs (`none` first; budget 1 rows reuse it)."""
    base = next(r for r in runs if r.name == "none")
    by_name = {r.name: r for r in runs}
    rows = [{"policy": "none", "budget": 1.0, "accuracy": _acc(base.scores, base.clusters),
             "drop_vs_none": None, "cache": base.cache, "runs": ["none"]}]
    for b in budgets:
        tag = f"b{b:g}"
        for policy in ("retrieval", "random", "uniform"):
            if b >= 1.0:
                rows.append({"policy": policy, "budget": 1.0, "accuracy": rows[0]["accuracy"],
                             "drop_vs_none": {"drop": 0.0, "ci_low": 0.0, "ci_high": 0.0},
                             "cache": base.cache, "runs": ["none"], "note": "nothing dropped: the none run"})
                continue
            chosen = sorted(n for n in by_name if n == f"{policy}_{tag}" or n.startswith(f"{policy}_{tag}_s"))
            if not chosen:
                continue
            group = [by_name[n] for n in chosen]
            values = np.mean([_aligned(base, r) for r in group], axis=0)
            row = {"policy": policy, "budget": b, "accuracy": _acc(values, base.clusters),
                   "drop_vs_none": _drop(base.scores, values, base.clusters, seed), "cache": _cache_mean(group),
                   "runs": chosen}
            if len(group) > 1:
                row["per_seed"] = [float(r.scores.mean()) for r in group]
            rows.append(row)
    clusters = len(set(base.clusters))
    return {"schema": SCHEMA, "n_docs": int(base.scores.size), "n_clusters": clusters, "rows": rows}


def _pct(v: float) -> str:
    return f"{100 * v:.1f}"


def markdown(data: dict[str, Any], plot_name: str) -> str:
    """The table as Markdown (the curve below it)."""
    tasks = ", ".join(md(t) for t in data["tasks"])
    heads = shown_path(data["heads_file"]) if data.get("heads_file") else None
    lines = [f"# KV cache: accuracy against image KV kept ({md(shown_model(data['model']))}, {tasks})", "",
             f"{data['n_docs']} docs on {data['n_clusters']} images; 95% intervals clustered by image; drops are "
             f"paired against no compression. Mode {md_code(data['mode'])}; sink {md(data['sink'])}, recent "
             f"{md(data['recent'])}; heads file {md(heads)}.", "",
             "| policy | budget | image KV kept % | KV bytes kept % | bytes freed by shrinking % | Acc % [95% CI] "
             "| drop vs none, points [95% CI] |",
             "|---|---|---|---|---|---|---|"]
    for row in data["rows"]:
        a, c, d = row["accuracy"], row["cache"], row["drop_vs_none"]
        full = c.get("kv_bytes_full") or 0
        kept = _pct(c["kv_bytes_kept"] / full) if full else "-"
        freed = _pct(1 - c["kv_bytes_physical"] / full) if full else "-"
        drop = "-" if d is None else f"{100 * d['drop']:+.1f} [{100 * d['ci_low']:+.1f}, {100 * d['ci_high']:+.1f}]"
        name = md(row["policy"]) + (f" ({len(row['per_seed'])} draws, each {_pct(min(row['per_seed']))}-"
                                f"{_pct(max(row['per_seed']))})" if row.get("per_seed") else "")
        lines.append(f"| {name} | {row['budget']:.3g} | {_pct(c.get('image_kv_kept', 1.0))} | {kept} | {freed} | "
                     f"{_pct(a['mean'])} [{_pct(a['ci_low'])}, {_pct(a['ci_high'])}] | {drop} |")
    lines += ["", f"![accuracy against image KV kept]({plot_name})", ""]
    return "\n".join(lines)


def curve(data: dict[str, Any], path) -> None:
    """Accuracy (with its interval) against the image KV kept, one line per policy, no compression as a band."""

    fig, ax = plt.subplots(figsize=(6, 4))
    none = data["rows"][0]["accuracy"]
    ax.axhspan(100 * none["ci_low"], 100 * none["ci_high"], color="grey", alpha=0.2, label="no compression")
    for policy, marker in (("retrieval", "o"), ("random", "s"), ("uniform", "^")):
        rows = sorted((r for r in data["rows"] if r["policy"] == policy), key=lambda r: r["budget"])
        if not rows:
            continue
        x = [100 * r["cache"].get("image_kv_kept", r["budget"]) for r in rows]
        y = np.array([100 * r["accuracy"]["mean"] for r in rows])
        err = np.array([[y[i] - 100 * r["accuracy"]["ci_low"], 100 * r["accuracy"]["ci_high"] - y[i]]
                        for i, r in enumerate(rows)]).T
        ax.errorbar(x, y, yerr=err, marker=marker, capsize=3, label=policy)
    ax.set_xlabel("image KV kept (%)")
    ax.set_ylabel("accuracy (%)")
    ax.invert_xaxis()
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
