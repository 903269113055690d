"""`vrh-lmms sample-efficiency HEADS_FILE`: how many samples discovery needs (top-k overlap vs n)."""

from __future__ import annotations

import argparse
from pathlib import Path

from vrh_lmms.base import owned
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.base.heads.plan import parse_int_list
from vrh_lmms.runs.discovery.efficiency import DEFAULT_NS, FILES, choose_k, write_efficiency


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("heads_file", help="heads file written by `vrh-lmms discover` (its .samples.npz is read)")
    parser.add_argument("--cell", default=None, help="scoring cell (default: the heads file's primary cell)")
    parser.add_argument("--k", type=int, default=None,
                        help="top-k to compare, at most 10%% of the model's heads (default: 20, or that cap when "
                             "it is smaller)")
    parser.add_argument("--ns", default=",".join(map(str, DEFAULT_NS)), help="sample counts n to try")
    parser.add_argument("--resamples", type=int, default=200, help="bootstrap resamples per n (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the subsample draws")
    parser.add_argument("--output", required=True, help="folder for efficiency.md, efficiency.json, efficiency.png")
    parser.add_argument("--force", action="store_true", help="replace efficiency results written here before")


def run(args: argparse.Namespace) -> int:
    hf = load_heads_file(args.heads_file)
    choose_k(args.k, hf.geometry.total_heads)  # a bad --k is refused before the folder is looked at
    out = Path(args.output)
    targets = [out / name for name in FILES]
    if any(t.exists() for t in targets):
        ours = owned.json_with("cell", "k", "rows")(targets[1])
        owned.refuse_foreign(out, [] if ours else [t for t in targets if t.exists()])
        if not args.force:
            raise VRHError(f"{out} already holds efficiency results; choose another --output or pass --force to "
                           f"replace them")
    write_efficiency(args.heads_file, out, cell=args.cell, k=args.k, ns=parse_int_list(args.ns, "--ns"),
                     resamples=args.resamples, seed=args.seed)
    print(targets[0].read_text())
    return 0
