"""`vrh-lmms patch`: per-head activation patching between expressions naming two objects of one image."""

from __future__ import annotations

import argparse

from vrh_lmms.base import console
from vrh_lmms.base.heads.plan import parse_int_list
from vrh_lmms.cli.commands.options import (
    add_control_options,
    add_draw_options,
    add_generation_options,
    add_model_options,
    plan_flags,
)
from vrh_lmms.harness import distributed
from vrh_lmms.report.interventions import write_patching_report
from vrh_lmms.runs.interventions.patch_run import DIRECTIONS, PatchSpec, run_patching


def configure(parser: argparse.ArgumentParser) -> None:
    add_model_options(parser)
    parser.add_argument("--tasks", required=True,
                        help="grounding task(s) with several objects per image, e.g. vrh_refcoco_val")
    parser.add_argument("--heads-file", required=True, help="heads file from `vrh-lmms discover`")
    parser.add_argument("--k", default="5,10", help="sizes of the head sets patched together (default 5,10)")
    parser.add_argument("--random-seeds", type=int, default=3, help="random head sets per k (default 3)")
    add_draw_options(parser, matched_by_default=True, random_flag=False)
    parser.add_argument("--pairs", choices=("correct", "all"), default="correct",
                        help="pair only correctly answered docs (default) or all answered docs")
    parser.add_argument("--answers", choices=("model", "reference"), default="model",
                        help="teacher-force the model's own answers (default) or the ground-truth boxes written in "
                             "the task's box convention")
    parser.add_argument("--pairs-per-image", type=int, default=2, help="ordered pairs (A, B) per image (default 2)")
    parser.add_argument("--max-pairs", type=int, default=50, help="pairs in all (default 50)")
    parser.add_argument("--direction", choices=DIRECTIONS, default="denoise",
                        help="denoise: clean activations into the corrupted run (default); noise: the reverse")
    parser.add_argument("--min-gap", type=float, default=1.0,
                        help="leave out pairs whose LD_clean - LD_corrupt is below this (nats, default 1)")
    parser.add_argument("--patch-batch", type=int, default=8,
                        help="patched copies of a run per forward (default 8; memory grows with it)")
    add_control_options(parser, "also control head sets per k")
    parser.add_argument("--limit", type=float, default=None,
                        help="docs per task evaluated to form pairs (default: all)")
    add_generation_options(parser)
    parser.add_argument("--seed", type=int, default=0, help="evaluator seed (default 0)")
    parser.add_argument("--output", required=True, help="patching folder (resumed if it holds the same run)")
    parser.add_argument("--force", action="store_true", help="discard a different run found in --output")


def run(args: argparse.Namespace) -> int:
    limit = None if args.limit is None else (int(args.limit) if float(args.limit).is_integer() else args.limit)
    spec = PatchSpec(model=args.model, model_args=args.model_args, tasks=[t for t in args.tasks.split(",") if t],
                     heads_file=args.heads_file, ks=parse_int_list(args.k, "--k"), random_seeds=args.random_seeds,
                     layer_matched=plan_flags(args)["layer_matched"], limit=limit, gen_kwargs=args.gen_kwargs,
                     seed=args.seed, per_image=args.pairs_per_image, max_pairs=args.max_pairs,
                     direction=args.direction, min_gap=args.min_gap, allow_cross_model=args.allow_cross_model,
                     patch_batch=args.patch_batch, pairs=args.pairs, answers=args.answers, controls=tuple(args.control),
                     control_tolerance=args.control_tolerance, control_pool=args.control_pool)
    console.step(f"activation patching: {args.model} on {', '.join(spec.tasks)}", line=False)
    path = run_patching(spec, args.output, force=args.force)
    out = path.parent
    if distributed.is_main():
        write_patching_report(out)
    console.print_summary(console.files_table("Patching done", [
        (out / "report.md", "the patching map and head-set recoveries"), (path, "its numbers"),
        (out / "patch_map.png", "the map"), *console.log_row()]))
    return 0
