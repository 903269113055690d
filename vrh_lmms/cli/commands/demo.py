"""`vrh-lmms demo`: discovery, causal validation and the report on the shipped tiny VLM (CPU, offline)."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from vrh_lmms.base import console
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.plan import parse_int_list
from vrh_lmms.base.synth.demo_spec import DemoSpec
from vrh_lmms.pipelines.demo.applications import run_applications
from vrh_lmms.pipelines.demo.stages import DemoSettings, demo_model_args


def configure(parser: argparse.ArgumentParser) -> None:
    d = DemoSettings()
    parser.add_argument("--output", default="runs/demo", help="output folder (default runs/demo)")
    parser.add_argument("--n-discovery", type=int, default=d.n_discovery, help="held-out scenes for discovery")
    parser.add_argument("--n-eval", type=int, default=d.n_eval, help="other held-out scenes for the sweep")
    parser.add_argument("--k", default=None, help="head counts (default: about 5%%, 10%% and 15%% of all heads)")
    parser.add_argument("--random-seeds", type=int, default=d.random_seeds, help="random draws per k")
    parser.add_argument("--pretrained", default=None, metavar="DIR",
                        help="a checkpoint folder of any model vrh-lmms runs (a family's, else vrh_hf; without "
                             "demo_spec.json: the default scenes at its processor's image size, no recall step; "
                             "default: the shipped model)")
    # `--model` names a vrh_* model in every other command; here it was the checkpoint folder (kept working)
    parser.add_argument("--model", dest="legacy_model", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--interventions", action="store_true",
                        help="also steer and patch heads (vrh-lmms steer / patch) on more scenes; adds the steering "
                             "table and the patching map to the report")
    parser.add_argument("--transfer", nargs="?", const="shipped", default=None, metavar="MODEL",
                        help="also a second VLM on the same text backbone (without MODEL: the shipped one, where the "
                             "version ships one): its own discovery and sweep, and each model's top-k heads ablated "
                             "in the other (the report's transfer table; default: none, one model)")
    parser.add_argument("--applications", action="store_true",
                        help="also put the heads to work: the locator (vrh-lmms locate) on the evaluation scenes and "
                             "the ranker (vrh-lmms rank) on multi-image queries; applications/applications.md")
    parser.add_argument("--n-queries", type=int, default=100, help="ranker queries with --applications (default 100)")
    parser.add_argument("--n-train", type=int, default=100,
                        help="ranking-loss training queries with --applications (default 100; 0 skips training)")
    parser.add_argument("--no-recall", dest="recall", action="store_false",
                        help="skip the recall step (the text backbone's and the VLM's text-recall heads against the "
                             "grounding heads: overlap and cross-ablation; about 50 s)")
    parser.add_argument("--force", action="store_true",
                        help="replace an earlier demo run in --output (a folder holding anything else is refused)")


def run(args: argparse.Namespace) -> int:
    if args.legacy_model is not None:
        print("vrh-lmms demo: --model DIR is now --pretrained DIR (--model names a vrh_* model in the other "
              "commands); going on with it", file=sys.stderr)
        args.pretrained = args.pretrained or args.legacy_model
    settings = DemoSettings(n_discovery=args.n_discovery, n_eval=args.n_eval,
                            ks=parse_int_list(args.k, "--k") if args.k else (), random_seeds=args.random_seeds,
                            interventions=args.interventions, transfer_model=args.transfer,
                            recall=args.recall)
    # deferred: keeps `vrh-lmms demo --help` free of scipy, matplotlib, statsmodels
    from vrh_lmms.pipelines.demo.pipeline import checked_model, run_demo

    if args.applications:  # a model that cannot take them is refused before the demo starts
        checked_model(args.pretrained, settings, applications=True)
    summary = run_demo(args.output, settings, force=args.force, model_path=args.pretrained)
    if args.applications:
        model = Path(summary["model"])
        spec = DemoSpec.load(model)
        run_applications(Path(args.output), demo_model_args(model, spec), spec, summary["settings"]["ks"],
                         args.random_seeds, args.n_eval, args.n_queries, console.step, model=model,
                         n_train=args.n_train, run_command=run_command)
    return 0


def run_command(name: str, argv: list[str]) -> None:
    """Run one vrh-lmms command in this process, as the command line would (demo --applications runs four)."""
    module = importlib.import_module(f"vrh_lmms.cli.commands.{name}")
    parser = argparse.ArgumentParser(prog=f"vrh-lmms {name}")
    module.configure(parser)
    status = module.run(parser.parse_args(argv))
    if status:
        raise VRHError(f"demo --applications: vrh-lmms {name} stopped with status {status}")
