"""Top-k overlap and Spearman of two heads files over the LIVE heads only (the demo model has 54 of 96 heads pruned:
both rankings put live heads first, so chance over all 96 heads understates the overlap chance would give).
Usage: python docs/experiments/text_needle_live_overlap.py A/heads.json[@cell] B/heads.json[@cell] [k ...]
(default cell: each file's primary)."""

from __future__ import annotations

import sys

from scipy.stats import hypergeom, spearmanr

from vrh_lmms.base.heads.heads_file import load_heads_file


def ranked(arg: str, dead: set[str] | None = None) -> tuple[list[str], dict[str, float], set[str]]:
    """A file's ranking and scores for one cell (`path@cell`; default its primary) and its dead heads."""
    path, _, cell = arg.partition("@")
    hf = load_heads_file(path)
    block = hf.cells[cell or hf.scoring["cell"]]
    names = [f"L{l}H{h}" for l in range(len(block["scores"])) for h in range(len(block["scores"][0]))]
    scores = {n: float(v) for n, v in zip(names, [v for row in block["scores"] for v in row])}
    return list(block["ranking"]), scores, set(hf.extra["dead_heads"]["heads"] or [])


def main(a: str, b: str, ks: list[int]) -> None:
    rank_a, score_a, dead_a = ranked(a)
    rank_b, score_b, dead_b = ranked(b)
    dead = dead_a | dead_b
    live = [n for n in score_a if n not in dead]
    rank_a, rank_b = [n for n in rank_a if n not in dead], [n for n in rank_b if n not in dead]
    rho, p_rho = spearmanr([score_a[n] for n in live], [score_b[n] for n in live])
    print(f"{a} vs {b}\nlive heads: {len(live)}; Spearman over them: {rho:.3f} (p = {p_rho:.3g})")
    for k in ks:
        shared = sorted(set(rank_a[:k]) & set(rank_b[:k]))
        p = hypergeom.sf(len(shared) - 1, len(live), k, k)
        print(f"k={k}: overlap {len(shared)} (chance {k * k / len(live):.2f}, p = {p:.3g}) {', '.join(shared)}")
        print(f"  A top-{k}: {', '.join(rank_a[:k])}\n  B top-{k}: {', '.join(rank_b[:k])}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], [int(k) for k in sys.argv[3:]] or [3, 5, 9])
