"""`vrh-lmms kv-cache`: VRH-aware KV cache. After prefill only the KV groups holding retrieval heads keep the image
tokens; accuracy against the image KV kept, beside random heads, uniform image-token pruning and no compression
(vrh_lmms.runs.kvcache.run; docs/applications.md 'KV cache')."""

from __future__ import annotations

import argparse

from vrh_lmms.cli.commands.options import add_generation_options, add_model_options
from vrh_lmms.model.kvcache.policy import RECENT, SINK


def configure(parser: argparse.ArgumentParser) -> None:
    add_model_options(parser)
    parser.add_argument("--tasks", required=True, help="task(s), comma-separated, e.g. vrh_refcoco_val")
    parser.add_argument("--heads-file", required=True, help="heads file whose ranking orders the KV groups")
    parser.add_argument("--k", type=int, default=None,
                        help="also evaluate the budget at which exactly the groups of the top-k heads keep images "
                             "(default: none)")
    parser.add_argument("--budgets", default="1,0.75,0.5,0.25,0.1",
                        help="shares of image KV kept, comma-separated (default 1,0.75,0.5,0.25,0.1)")
    parser.add_argument("--random-seeds", type=int, default=3, help="random-head draws per budget (default 3)")
    parser.add_argument("--mode", default="mask", choices=("mask", "compress", "compact"),
                        help="mask: exact masking of the dropped keys (default); compress: also remove them from "
                             "the cache of layers whose groups all drop the same keys; compact: gather every "
                             "layer's kept keys into per-layer buffers after prefill (any batch size, no per-step "
                             "mask building)")
    parser.add_argument("--sink", type=int, default=SINK, help=f"first positions always kept (default {SINK})")
    parser.add_argument("--recent", type=int, default=RECENT,
                        help=f"last prompt positions always kept (default {RECENT})")
    parser.add_argument("--limit", type=int, default=None, help="docs per task (default all)")
    add_generation_options(parser)
    parser.add_argument("--seed", type=int, default=0, help="evaluator seed, and the seed of the accuracy intervals")
    parser.add_argument("--output", required=True, help="output folder")
    parser.add_argument("--force", action="store_true",
                        help="replace another kv-cache run's result in the folder, or run this one again")




def run(args: argparse.Namespace) -> int:
    # deferred: keeps `vrh-lmms kv-cache --help` free of torch, transformers, matplotlib
    from vrh_lmms.runs.kvcache.run import run_kv_cache

    return run_kv_cache(args)
