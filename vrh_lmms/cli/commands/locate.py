"""`vrh-lmms locate`: the training-free locator. The top-k heads' attention map over the image becomes a box
(Localization Heads' recipe, vrh_lmms.runs.maps.locator); Acc@0.5 of the located boxes against the ground truth, beside
the model's own answer, for the top-k VRHs, random-k and layer-matched heads, with the report's intervals
(vrh_lmms.runs.maps.locate)."""

from __future__ import annotations

import argparse

from vrh_lmms.base.heads.kinds import DEFAULT_POOL, POOLS
from vrh_lmms.cli.commands.attention_maps import add_map_options


def configure(parser: argparse.ArgumentParser) -> None:
    add_map_options(parser)
    parser.add_argument("--limit", type=int, default=100, help="docs per task (default 100; -1 for all)")
    parser.add_argument("--k", default="5,10,20", help="head-set sizes, comma-separated (default 5,10,20)")
    parser.add_argument("--random-seeds", type=int, default=10,
                        help="random-k and layer-matched draws per k (default 10)")
    parser.add_argument("--control-pool", default=DEFAULT_POOL, choices=POOLS,
                        help="what control draws are drawn from: live heads (default) or all heads")




def run(args: argparse.Namespace) -> int:
    # deferred: keeps `vrh-lmms locate --help` free of torch and statsmodels
    from vrh_lmms.runs.maps.locate import run_locate

    return run_locate(args)
