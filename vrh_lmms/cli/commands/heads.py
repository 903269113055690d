"""`vrh-lmms heads FILE [--spec SPEC]`: show a heads file's top heads, or resolve a head spec against it."""

from __future__ import annotations

import argparse

import numpy as np

from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.base.heads.spec import resolve_spec


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("heads_file", help="a heads file (vrh-heads/1 JSON)")
    parser.add_argument("--top", type=int, default=20, help="how many top heads to show (default 20)")
    parser.add_argument("--spec", help="resolve this head spec (e.g. top20, random20, like:top20) against the file "
                                           "(default: none, show the file)")
    parser.add_argument("--seed", type=int, default=0, help="seed of a drawn --spec (random<K>, like:top<K>)")
    parser.add_argument("--cell", help="rank by another scoring cell stored in the file (default: its primary cell)")


def run(args: argparse.Namespace) -> int:
    hf = load_heads_file(args.heads_file)
    g = hf.geometry
    if args.spec:
        hs = resolve_spec(args.spec, g, heads_file=hf, seed=args.seed, cell=args.cell)
        print(";".join(hs.names) or "none")
        return 0
    # the title names the ranking shown below it: the --cell asked for (and the cell a preset stands for), else the
    # file's primary cell
    primary = f"{hf.scoring.get('query')},{hf.scoring.get('key')},{hf.scoring.get('aggregate')}"
    shown = primary if not args.cell else hf.cell_name(args.cell)
    if args.cell and args.cell != shown:
        shown = f"{args.cell} (cell {shown})"
    print(f"model {hf.model.get('id')} ({hf.model.get('family')}): {g.describe()}; scoring {shown} on "
          f"{hf.scoring.get('task')} "
          f"(n={hf.scoring.get('n_samples')})")
    ranking = hf.cell_ranking(args.cell) if args.cell else hf.ranking
    scores = np.asarray(hf.cells[hf.cell_name(args.cell)]["scores"]) if args.cell else hf.scores
    for i, h in enumerate(ranking[:args.top], 1):
        print(f"{i:3d}  {h}  {scores[h.layer, h.head]:.4f}")
    return 0
