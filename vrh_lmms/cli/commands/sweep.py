"""`vrh-lmms sweep`: causal validation of a heads file against random and layer-matched controls."""

from __future__ import annotations

import argparse

from vrh_lmms.base import console, gc_startup
from vrh_lmms.base.heads.plan import parse_int_list, plan_configurations
from vrh_lmms.cli.commands.options import add_control_options, add_draw_options, add_model_options, plan_flags
from vrh_lmms.harness.sweep_engine import ENGINES
from vrh_lmms.runs.protocol import SWEEP_PRESETS, compare_cells, resolve
from vrh_lmms.runs.sweep.packs import parse_pack
from vrh_lmms.runs.sweep.run import SweepSpec, run_sweep


def configure(parser: argparse.ArgumentParser) -> None:
    add_model_options(parser)
    parser.add_argument("--tasks", required=True, help="comma-separated tasks, e.g. vrh_refcoco_val,vrh_vqa")
    parser.add_argument("--heads-file", help="heads file from `vrh-lmms discover` (needed for top-k; default: none, "
                                                 "baseline and random draws only)")
    parser.add_argument("--k", default=None, help="head counts to ablate (default 1,5,10,20,40)")
    parser.add_argument("--preset", default=None, choices=sorted(SWEEP_PRESETS),
                        help="the paper's protocol (docs/paper.md): paper = k 1,3,5,10,20, "
                             "random controls over all heads and outside the top-k, discovery docs left out; "
                             "paper_a9 = the same at k 5,10,20,50 (Table A9). Explicit flags win (default: none, "
                             "each flag's own default)")
    parser.add_argument("--random-seeds", type=int, default=19,
                        help="random draws per k (default 19: the fewest whose empirical p can reach 0.05)")
    add_draw_options(parser)
    add_control_options(parser, "extra control head sets per k and seed", preset=True)
    parser.add_argument("--random-skip-layer0", action="store_true",
                        help="draw the random-k heads outside layer 0 (spec random<K>:skip_layer0; the control of "
                             "the paper's DPO experiment)")
    parser.add_argument("--ablation", default="zero",
                        help="comma-separated modes: zero, mean, uniform, uniform_image (default zero)")
    parser.add_argument("--limit", type=float, default=None, help="docs per task, for quick runs (default: all)")
    parser.add_argument("--batch-size", type=int, default=1, help="docs per generate call")
    parser.add_argument("--pack", default="auto",
                        help="configurations evaluated side by side in one batch (default auto: up to 100 batch "
                             "rows on CPU, 32 on CUDA; 1 = one configuration at a time). Same files either way")
    parser.add_argument("--engine", default="fast", choices=ENGINES,
                        help="fast (default): each task and each pack's model inputs built once for all "
                             "configurations; lmms: everything rebuilt per configuration, as a plain lmms-eval run "
                             "does (the reference). Same files either way (docs/sweeps.md)")
    parser.add_argument("--gen-kwargs", default=None,
                        help="lmms-eval generation kwargs, e.g. max_new_tokens=16 (default: the task's own)")
    parser.add_argument("--seed", type=int, default=0, help="evaluator seed (default 0)")
    parser.add_argument("--allow-cross-model", action="store_true",
                        help="use a heads file made on another geometry (transfer experiments)")
    parser.add_argument("--compare-cells", default=None,
                        help="also mask, at each k, the top-k of other scoring cells of the heads file: fig2 (the "
                             "default cell with Q, Phi or Omega flipped), fig3 (prior methods: retrieval_heads, "
                             "qrhead, ocr_heads, vera, localization_heads), fig8b (out_random1), a8 (in+out), "
                             "paper (all), or a '+'-separated list; the report compares them in one table and plot")
    parser.add_argument("--exclude-discovery-docs", action="store_const", const="on", default=None,
                        help="leave out the docs --heads-file was found on (the paper's disjoint evaluation; "
                             "recorded in sweep.json and each run)")
    parser.add_argument("--control-docs", type=int, default=None, metavar="N",
                        help="evaluate the control configurations (random, random-outside, layer- and image-matched "
                             "draws) on one seeded subset of each task's docs: whole images until N docs, the same "
                             "for every draw (seeded by --seed); baseline and top-k keep every doc. Default: every "
                             "doc (docs/sweeps.md, 'Control draws on fewer docs')")
    parser.add_argument("--output", required=True, help="sweep folder (resumed if it holds the same sweep)")
    parser.add_argument("--force", action="store_true",
                        help="discard a different sweep found in --output (only its sweep files; anything else there "
                             "is refused)")


def run(args: argparse.Namespace) -> int:
    with gc_startup.paused():  # no cyclic collection while start-up imports; run_sweep settles it after the model loads
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    limit = None if args.limit is None else (int(args.limit) if float(args.limit).is_integer() else args.limit)
    opts = resolve(SWEEP_PRESETS, args.preset, {"k": args.k, "controls": args.control,
                                                 "control_pool": args.control_pool,
                                                 "exclude_discovery_docs": args.exclude_discovery_docs})
    configs = plan_configurations(parse_int_list(opts["k"], "--k"), args.random_seeds,
                                  modes=[m.strip() for m in args.ablation.split(",") if m.strip()],
                                  **plan_flags(args), controls=opts["controls"],
                                  control_tolerance=args.control_tolerance,
                                  cells=compare_cells(args.compare_cells, args.heads_file),
                                  random_skip_layer0=args.random_skip_layer0, pool=opts["control_pool"])
    spec = SweepSpec(model=args.model, model_args=args.model_args, tasks=[t for t in args.tasks.split(",") if t],
                     heads_file=args.heads_file, configurations=configs, limit=limit, batch_size=args.batch_size,
                     gen_kwargs=args.gen_kwargs, seed=args.seed, allow_cross_model=args.allow_cross_model,
                     pack=parse_pack(args.pack),
                     exclude_discovery_docs=opts["exclude_discovery_docs"], engine=args.engine,
                     control_docs=args.control_docs,
                     extra={"preset": args.preset} if args.preset else {})
    console.step(f"sweep: {len(configs)} configurations of {args.model} on {', '.join(spec.tasks)}", line=False)
    out = run_sweep(spec, args.output, force=args.force)
    console.print_summary(console.files_table(f"Sweep done: {len(configs)} configurations", [
        (out / "configs", "one lmms-eval results folder per configuration"),
        (out / "sweep.json", "the sweep's manifest"), *console.log_row()]),
        f"Next: vrh-lmms report {out} --output <report folder>")
    return 0
