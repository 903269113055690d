"""The demo model's causal protocol: k-curves of top-k, random-k and layer-matched random-k ablations, and a
causal oracle, so that "the scorer misses the causal heads" and "the model has no sparse causal heads" are
separate findings.

- **top-k**: the k best heads of a score ranking (attention mass of the answer rows on the target tokens).
- **random-k**: k heads drawn uniformly from all heads; **layer-matched**: as many heads per layer as top-k, drawn
  from the other heads of those layers.
- **oracle-k**: the k heads whose *single-head* ablation costs most. If oracle-k breaks the task and top-k does
  not, the scorer misses the causal heads; if neither does, the model has no sparse causal head set (the task is
  spread, or redundant).

Works on any `evaluate(heads) -> per-sample correctness` (greedy grounding, teacher-forced text recall).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from vrh_lmms.base.heads.geometry import head_name
from vrh_lmms.pipelines.demo.model_heads import Head, layer_matched_heads, random_heads, ranking

Evaluate = Callable[[Sequence[Head]], np.ndarray]


def default_ks(total_heads: int) -> list[int]:
    """k = 1 .. N/4: every k up to 10, then every 2 up to 16, then every 4."""
    top = max(1, total_heads // 4)
    ks = list(range(1, min(10, top) + 1)) + list(range(12, min(16, top) + 1, 2)) + list(range(20, top + 1, 4))
    return sorted(set(ks) | {top})


def single_head_effects(evaluate: Evaluate, n_layers: int, n_heads: int, base: np.ndarray) -> np.ndarray:
    """layers x heads: accuracy drop (points) from ablating each head alone."""
    out = np.zeros((n_layers, n_heads))
    b = base.mean()
    for layer in range(n_layers):
        for head in range(n_heads):
            out[layer, head] = 100 * (b - evaluate([(layer, head)]).mean())
    return out


def k_curve(evaluate: Evaluate, scores: np.ndarray, ks: Sequence[int], draws: int = 10, seed: int = 0,
            oracle: bool = True, log: Callable[[str], None] = lambda s: None,
            on_row: Callable[[dict], None] = lambda result: None) -> dict:
    """Drops (points) per k for top-k, oracle-k, `draws` random-k and `draws` layer-matched random-k sets.

    `on_row(result)` runs after each k (the protocol saves the partial result there). A k whose top set fills a
    layer beyond its other heads has no layer-matched draws (`layer_matched_mean` None, the reason beside it)."""
    n_layers, n_heads = scores.shape
    base = evaluate([])
    b = float(base.mean())
    order = ranking(scores)
    result: dict = {"baseline_acc": b, "n": int(base.size), "layers": n_layers, "heads": n_heads,
                    "ranking": [head_name(l, h) for l, h in order], "draws": draws, "rows": []}
    if oracle:
        effects = single_head_effects(evaluate, n_layers, n_heads, base)
        result["single_head_drops"] = effects.round(2).tolist()
        oracle_order = ranking(effects)
        result["oracle_ranking"] = [head_name(l, h) for l, h in oracle_order]
    rng = np.random.default_rng(seed)
    for k in ks:
        top = order[:k]
        row: dict = {"k": int(k), "top_heads": [head_name(l, h) for l, h in top],
                     "top_drop": 100 * (b - float(evaluate(top).mean()))}
        if oracle:
            row["oracle_drop"] = 100 * (b - float(evaluate(oracle_order[:k]).mean()))
        row["random_drops"] = [100 * (b - float(evaluate(random_heads(n_layers, n_heads, k, rng)).mean()))
                               for _ in range(draws)]
        try:
            row["layer_matched_drops"] = [100 * (b - float(evaluate(layer_matched_heads(top, n_heads, rng)).mean()))
                                          for _ in range(draws)]
        except ValueError as exc:  # a layer holds more top heads than it has other heads: no layer-matched set
            row["layer_matched_drops"], row["layer_matched_unavailable"] = [], str(exc)
        for kind in ("random", "layer_matched"):
            drops = row[f"{kind}_drops"]
            row[f"{kind}_mean"] = float(np.mean(drops)) if drops else None
        lm = row["layer_matched_mean"]
        log(f"k={k:>2}: top {row['top_drop']:6.1f}"
            + (f" oracle {row['oracle_drop']:6.1f}" if oracle else "")
            + f" random {row['random_mean']:6.1f} layer-matched " + ("n/a" if lm is None else f"{lm:6.1f}"))
        result["rows"].append(row)
        on_row(result)
    return result


def meets_criteria(result: dict, max_share: float = 0.10) -> list[int]:
    """ks (<= max_share of all heads) at which top-k drops >= 40 points while random-k and layer-matched random-k
    mean drops stay <= 10 (the demo model's acceptance figures, before confidence intervals)."""
    total = result["layers"] * result["heads"]
    return [r["k"] for r in result["rows"] if r["k"] <= max_share * total and r["top_drop"] >= 40
            and r["random_mean"] <= 10 and r["layer_matched_mean"] is not None and r["layer_matched_mean"] <= 10
            and result["baseline_acc"] >= 0.8]


def plot_k_curve(result: dict, path, title: str, pool: str = "") -> None:
    """Top-k, oracle-k, random-k and layer-matched drops against k (means with min-max bands); `pool` ("live") names
    what the random and layer-matched draws came from in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vrh_lmms.report.plots import DPI, legend_outside

    rows = result["rows"]
    ks = [r["k"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4.4), layout="constrained")
    ax.plot(ks, [r["top_drop"] for r in rows], "o-", color="C3", label="top-k (scorer)")
    if rows and "oracle_drop" in rows[0]:
        ax.plot(ks, [r["oracle_drop"] for r in rows], "s--", color="C1", label="oracle-k (single-head effect)")
    lead = f"{pool} " if pool else ""
    for kind, colour, label in (("random", "C0", f"{lead}random-k"),
                                ("layer_matched", "C2", f"{lead}layer-matched random-k"),
                                ("random_all", "C7", "uniform random-k, all heads")):
        kept = [r for r in rows if r.get(f"{kind}_drops")]
        if not kept:
            continue
        d = np.array([r[f"{kind}_drops"] for r in kept])
        x = [r["k"] for r in kept]
        ax.plot(x, d.mean(1), "^-", color=colour, label=f"{label} (mean of {d.shape[1]})")
        ax.fill_between(x, d.min(1), d.max(1), color=colour, alpha=0.15)
    total = result["layers"] * result["heads"]
    ax.axvline(0.10 * total, color="grey", lw=0.8, ls=":")
    ax.set_xlabel(f"k (heads ablated, of {total})")
    ax.set_ylabel("accuracy drop (points)")
    ax.set_title(title, fontsize=9)
    legend_outside(fig)  # under the axes: inside, it covered the top-k point at k = 9
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
