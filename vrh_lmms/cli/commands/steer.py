"""`vrh-lmms steer`: steer top-k / random-k / layer-matched heads toward another object of the image."""

from __future__ import annotations

import argparse

from vrh_lmms.base import console
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.plan import parse_int_list, plan_configurations
from vrh_lmms.cli.commands.options import (
    add_control_options,
    add_draw_options,
    add_generation_options,
    add_model_options,
    plan_flags,
)
from vrh_lmms.harness import distributed
from vrh_lmms.report.interventions import write_steering_report
from vrh_lmms.runs.interventions.steer_run import SteerSpec, plan_steering, run_steering


def parse_float_list(text: str, what: str) -> list[float]:
    try:
        return [float(v) for v in str(text).replace(";", ",").split(",") if v.strip()]
    except ValueError:
        raise VRHError(f"{what} {text!r}: expected comma-separated numbers, e.g. 2,4,8") from None


def configure(parser: argparse.ArgumentParser) -> None:
    add_model_options(parser)
    parser.add_argument("--tasks", required=True,
                        help="grounding task(s) with several objects per image, e.g. vrh_refcoco_val")
    parser.add_argument("--heads-file", required=True, help="heads file from `vrh-lmms discover`")
    parser.add_argument("--k", default="5,10,20", help="head counts to steer (default 5,10,20)")
    parser.add_argument("--bias", default="2,4,8", help="bias strengths added to the logits (default 2,4,8)")
    parser.add_argument("--random-seeds", type=int, default=3, help="random draws per k (default 3)")
    add_draw_options(parser)
    add_control_options(parser, "also control head sets per k")
    parser.add_argument("--limit", type=float, default=None, help="docs per task, for quick runs (default: all)")
    parser.add_argument("--batch-size", type=int, default=1,
                        help="docs per generate call (default 1; larger batches need a backend that looks docs up in "
                             "batch order, which is checked)")
    add_generation_options(parser)
    parser.add_argument("--seed", type=int, default=0, help="evaluator seed (default 0)")
    parser.add_argument("--distractor-seed", type=int, default=0, help="seed of the per-doc distractor draw")
    parser.add_argument("--output", required=True, help="steering folder (resumed if it holds the same run)")
    parser.add_argument("--force", action="store_true", help="discard a different run found in --output")


def run(args: argparse.Namespace) -> int:
    limit = None if args.limit is None else (int(args.limit) if float(args.limit).is_integer() else args.limit)
    heads = plan_configurations(parse_int_list(args.k, "--k"), args.random_seeds, modes=["zero"], **plan_flags(args),
                                controls=args.control, control_tolerance=args.control_tolerance,
                                pool=args.control_pool)
    configs = plan_steering(heads, parse_float_list(args.bias, "--bias"))
    spec = SteerSpec(model=args.model, model_args=args.model_args, tasks=[t for t in args.tasks.split(",") if t],
                     heads_file=args.heads_file, configurations=configs, limit=limit, gen_kwargs=args.gen_kwargs,
                     seed=args.seed, distractor_seed=args.distractor_seed, allow_cross_model=args.allow_cross_model,
                     batch_size=args.batch_size)
    console.step(f"steering: {len(configs)} configurations of {args.model} on {', '.join(spec.tasks)}", line=False)
    out = run_steering(spec, args.output, force=args.force)
    if distributed.is_main():
        write_steering_report(out)
    console.print_summary(console.files_table("Steering done", [
        (out / "report.md", "the steering table"), (out / "summary.json", "its numbers"),
        (out / "configs", "one lmms-eval results folder per configuration"), *console.log_row()]))
    return 0
