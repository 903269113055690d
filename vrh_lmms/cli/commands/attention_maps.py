"""`vrh-lmms attention-maps`: every head's attention over the image for chosen docs (the paper's Figs A1/A2):
the mean of all heads, of the top-k VRHs, and of all heads but the VRHs, with the GT, predicted and located boxes
(vrh_lmms.runs.maps.attention_maps)."""

from __future__ import annotations

import argparse

from vrh_lmms.cli.commands.options import add_generation_options, add_model_options
from vrh_lmms.runs.maps.capture import ROWS


def add_map_options(parser: argparse.ArgumentParser) -> None:
    """Options both map commands share (attention-maps, locate)."""
    add_model_options(parser)
    parser.add_argument("--tasks", required=True, help="grounding task(s) with vrh_record, e.g. vrh_refcoco_val")
    parser.add_argument("--heads-file", required=True, help="heads file whose ranking gives the top-k VRHs")
    parser.add_argument("--rows", default="answer", choices=ROWS,
                        help="query rows: answer (the model's answer tokens, default), prompt (the referring "
                             "expression's tokens), last (the last prompt token)")
    parser.add_argument("--sigma", type=float, default=1.0,
                        help="locator: Gaussian smoothing in cells (default 1.0; 0 = none)")
    parser.add_argument("--threshold", default="mean",
                        help="locator: keep cells >= the smoothed map's mean (default 'mean'), or >= this fraction "
                             "of its maximum (e.g. 0.5)")
    add_generation_options(parser)
    parser.add_argument("--seed", type=int, default=0, help="evaluator seed (lmms-eval's --seed)")
    parser.add_argument("--output", required=True, help="output folder")
    parser.add_argument("--force", action="store_true",
                        help="replace another run's result in the output folder, or run this one again")



def configure(parser: argparse.ArgumentParser) -> None:
    add_map_options(parser)
    parser.add_argument("--docs", default="0", help="doc ids, comma-separated (default 0), e.g. 0,3,7")
    parser.add_argument("--k", type=int, default=20, help="top-k VRHs of the heads file (default 20)")




def run(args: argparse.Namespace) -> int:
    # deferred: keeps `vrh-lmms attention-maps --help` free of torch
    from vrh_lmms.runs.maps.attention_maps import run_attention_maps

    return run_attention_maps(args)
