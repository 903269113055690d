"""`vrh-lmms rank`: retrieval heads as a ranker. Several candidate images and a query in one prompt; candidates are
ranked by the heads' attention mass from the last prompt row (null-question calibrated); Recall@1/@5 and MRR of the
top-k heads vs all live heads vs random-k, with clustered intervals (vrh_lmms.runs.rank.run; docs/applications.md,
Ranker)."""

from __future__ import annotations

import argparse

from vrh_lmms.cli.commands.options import add_model_options


def configure(parser: argparse.ArgumentParser) -> None:
    add_model_options(parser)
    parser.add_argument("--data", required=True,
                        help="'synth' (seeded synthetic multi-image set) or 'mmdocir:<folder>' (MMDocIR's "
                             "MMDocIR_annotations.jsonl and MMDocIR_pages.parquet; page level)")
    parser.add_argument("--heads-file", required=True, help="heads file whose ranking gives the top-k heads")
    parser.add_argument("--k", default="5", help="top-k sizes, comma-separated (default 5)")
    parser.add_argument("--random-seeds", type=int, default=10, help="random-k draws from the live heads (default 10)")
    parser.add_argument("--limit", type=int, default=100, help="queries (default 100)")
    parser.add_argument("--candidates", type=int, default=4, help="synth: candidate images per query (default 4)")
    parser.add_argument("--scene-seed", type=int, default=None,
                        help="synth: scene stream seed (default: the demo's held-out seed, 2)")
    parser.add_argument("--scene-start", type=int, default=100_000,
                        help="synth: first scene id (default 100000, the demo's held-out scenes)")
    parser.add_argument("--max-pages", type=int, default=None,
                        help="mmdocir: leave out documents with more pages than this (all of a document's pages "
                             "are its candidates, in one prompt; default: none, every document)")
    parser.add_argument("--allow-cross-model", action="store_true", help="use a heads file of another geometry")
    parser.add_argument("--output", required=True, help="output folder")
    parser.add_argument("--force", action="store_true",
                        help="replace another run's result in the output folder, or run this one again")




def run(args: argparse.Namespace) -> int:
    # deferred: keeps `vrh-lmms rank --help` free of torch, transformers, scipy
    from vrh_lmms.runs.rank.run import run_rank

    return run_rank(args)
