"""`vrh-lmms sweep`: causal validation of a heads file against random and layer-matched controls."""

from __future__ import annotations

import argparse

from vrh_lmms import console
from vrh_lmms.commands.options import add_control_options, add_model_options
from vrh_lmms.sweep.plan import parse_int_list, parse_pack, plan_configurations
from vrh_lmms.sweep.run import SweepSpec, run_sweep


def configure(parser: argparse.ArgumentParser) -> None:
    add_model_options(parser)
    parser.add_argument("--tasks", required=True, help="comma-separated tasks, e.g. vrh_refcoco_val,vrh_vqa")
    parser.add_argument("--heads-file", help="heads file from `vrh-lmms discover` (needed for top-k)")
    parser.add_argument("--k", default="1,5,10,20,40", help="head counts to ablate (default 1,5,10,20,40)")
    parser.add_argument("--random-seeds", type=int, default=19,
                        help="random draws per k (default 19: the fewest whose empirical p can reach 0.05)")
    parser.add_argument("--layer-matched", action="store_true", help="also layer-matched random-k controls")
    add_control_options(parser, "extra control head sets per k and seed")
    parser.add_argument("--no-random", action="store_true", help="skip uniform random-k controls")
    parser.add_argument("--random-skip-layer0", action="store_true",
                        help="draw the random-k heads outside layer 0 (spec random<K>:skip_layer0; the control of "
                             "the paper's DPO experiment)")
    parser.add_argument("--ablation", default="zero",
                        help="comma-separated modes: zero, mean, uniform, uniform_image (default zero)")
    parser.add_argument("--limit", type=float, default=None, help="docs per task (for quick runs)")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--pack", default="auto",
                        help="configurations evaluated side by side in one batch (default auto: up to 100 batch "
                             "rows on CPU, 32 on CUDA; 1 = one configuration at a time). Same files either way")
    parser.add_argument("--gen-kwargs", default=None, help="lmms-eval generation kwargs override")
    parser.add_argument("--seed", type=int, default=0, help="evaluator seed (default 0)")
    parser.add_argument("--allow-cross-model", action="store_true",
                        help="use a heads file made on another geometry (transfer experiments)")
    parser.add_argument("--output", required=True, help="sweep folder (resumed if it holds the same sweep)")
    parser.add_argument("--force", action="store_true",
                        help="discard a different sweep found in --output (only its sweep files; anything else there "
                             "is refused)")


def run(args: argparse.Namespace) -> int:
    limit = None if args.limit is None else (int(args.limit) if float(args.limit).is_integer() else args.limit)
    configs = plan_configurations(parse_int_list(args.k, "--k"), args.random_seeds, args.layer_matched,
                                  [m.strip() for m in args.ablation.split(",") if m.strip()],
                                  random=not args.no_random, controls=args.control,
                                  control_tolerance=args.control_tolerance,
                                  random_skip_layer0=args.random_skip_layer0)
    spec = SweepSpec(model=args.model, model_args=args.model_args, tasks=[t for t in args.tasks.split(",") if t],
                     heads_file=args.heads_file, configurations=configs, limit=limit, batch_size=args.batch_size,
                     gen_kwargs=args.gen_kwargs, seed=args.seed, allow_cross_model=args.allow_cross_model,
                     pack=parse_pack(args.pack), control_pool=args.control_pool)
    console.step(f"sweep: {len(configs)} configurations of {args.model} on {', '.join(spec.tasks)}", line=False)
    out = run_sweep(spec, args.output, force=args.force)
    console.print_summary(console.files_table(f"Sweep done: {len(configs)} configurations", [
        (out / "configs", "one lmms-eval results folder per configuration"),
        (out / "sweep.json", "the sweep's manifest"), *console.log_row()]),
        f"Next: vrh-lmms report {out} --output <report folder>")
    return 0
