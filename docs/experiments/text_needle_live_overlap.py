"""Top-k overlap and Spearman of two heads files over the LIVE heads only (the demo model has 54 of 96 heads pruned:
both rankings put live heads first, so chance over all 96 heads understates the overlap chance would give).
Usage: python docs/experiments/text_needle_live_overlap.py A/heads.json B/heads.json [k ...]"""

from __future__ import annotations

import sys

from scipy.stats import hypergeom, spearmanr

from vrh_lmms.heads.heads_file import load_heads_file


def main(a: str, b: str, ks: list[int]) -> None:
    fa, fb = load_heads_file(a), load_heads_file(b)
    dead = set(fa.extra["dead_heads"]["heads"] or []) | set(fb.extra["dead_heads"]["heads"] or [])
    live = [n for n in fa.cells[fa.scoring["cell"]]["ranking"] if n not in dead]
    rank_a = [str(h) for h in fa.ranking if str(h) not in dead]
    rank_b = [str(h) for h in fb.ranking if str(h) not in dead]
    score_a = {f"L{l}H{h}": fa.scores[l][h] for l in range(len(fa.scores)) for h in range(len(fa.scores[0]))}
    score_b = {f"L{l}H{h}": fb.scores[l][h] for l in range(len(fb.scores)) for h in range(len(fb.scores[0]))}
    rho, p_rho = spearmanr([score_a[n] for n in live], [score_b[n] for n in live])
    print(f"live heads: {len(live)}; Spearman over them: {rho:.3f} (p = {p_rho:.3g})")
    for k in ks:
        shared = sorted(set(rank_a[:k]) & set(rank_b[:k]))
        p = hypergeom.sf(len(shared) - 1, len(live), k, k)
        print(f"k={k}: overlap {len(shared)} (chance {k * k / len(live):.2f}, p = {p:.3g}) {', '.join(shared)}")
        print(f"  A top-{k}: {', '.join(rank_a[:k])}\n  B top-{k}: {', '.join(rank_b[:k])}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], [int(k) for k in sys.argv[3:]] or [3, 5, 9])
