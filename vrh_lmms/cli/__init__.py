"""`vrh-lmms` command line: one subcommand per module under `vrh_lmms.cli.commands`, imported only when used."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

from vrh_lmms.base import runfile
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.runfile import CONFIG_COMMANDS
from vrh_lmms.cli.commands.options import DefaultsHelpFormatter

# The first line of `vrh-lmms --help`: what a user does with the tool, and where to start.
DESCRIPTION = ("Find the retrieval heads of a vision-language model, ablate them against random controls and report "
               "what they do, as an lmms-eval plugin. New here? Run `vrh-lmms demo` (a few minutes on a CPU, "
               "no weights, no hub).")

# name -> (module under vrh_lmms.cli.commands, one-line help). Modules expose `configure(parser)` and `run(args) ->
# int`.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("demo", "discover, validate and report on the shipped tiny VLM (no weights, no hub)"),
    "discover": ("discover", "score every head of a model on a grounding task and write a heads file"),
    "sweep": ("sweep", "evaluate baseline, top-k, random-k and layer-matched random-k head ablations"),
    "steer": ("steer", "steer head sets toward another object of the image (sufficiency of the heads)"),
    "patch": ("patch", "activation patching of every head between expressions naming two objects of an image"),
    "report": ("report", "statistics, tables and plots from sweep or lmms-eval output folders"),
    "sample-efficiency": ("sample_efficiency", "top-k overlap of rankings from n samples vs all samples"),
    "dpo-pairs": ("dpo_pairs", "TRL-ready preference pairs: correct answers vs ablated answers"),
    "dpo-train": ("dpo_train", "DPO fine-tune (TRL) on dpo-pairs output; the paper's recipe by default"),
    "export-masked": ("export_masked", "write a checkpoint with heads folded out of o_proj"),
    "eval": ("eval", "run lmms-eval with vrh tasks included and the device chosen for you"),
    "make-tiny": ("make_tiny", "write a tiny random-weight checkpoint of a real VLM class"),
    "train-tiny": ("train_tiny", "train the tiny grounding VLM shipped with the demo"),
    "synth": ("synth", "write synthetic grounding data in the hub or refer layout"),
    "tasks-path": ("tasks_path", "print the folder of the plugin's lmms-eval task YAMLs"),
    "heads": ("heads", "show a heads file or resolve a head spec against it"),
    "replicate": ("replicate", "the paper's protocol on one model, table by table, into one report"),
    "attention-maps": ("attention_maps", "each head's attention over the image for chosen docs: PNG per doc + grids"),
    "locate": ("locate", "training-free locator: boxes from the top-k heads' attention maps, Acc@0.5 vs controls"),
    "compare-heads": ("compare_heads", "top-k overlap (vs chance), Jaccard and Spearman between heads files"),
    "score-distribution": ("score_distribution", "share of heads above score thresholds, with a log-scale plot"),
    "rank": ("rank", "heads as a ranker: candidate images ranked by attention mass, top-k vs all vs random heads"),
    "kv-cache": ("kv_cache", "VRH-aware KV cache: accuracy against image KV kept, beside random and uniform"),
    "rank-train": ("rank_train", "fine-tune (HF Trainer) with a ranking loss on the heads' attention over candidates"),
}


# Commands that run a model: torch's CPU thread count is chosen from the free cores first (vrh_lmms.model.device).
MODEL_COMMANDS = ("demo", "discover", "sweep", "export-masked", "eval", "replicate")
# Commands that split their docs across the ranks of torchrun / accelerate launch (docs/scaling.md); the others
# refuse to start on several ranks.
RANK_COMMANDS = ("discover", "sweep", "steer", "patch", "eval")
# Commands that show one progress display and a closing summary, their libraries' output kept in a log file in the
# output folder (vrh_lmms.base.console); `--verbose` shows everything instead.
QUIET_COMMANDS = ("demo", "discover", "sweep", "steer", "patch", "report", "replicate")
MODEL_COMMANDS += ("attention-maps", "locate", "dpo-train")
QUIET_COMMANDS += ("attention-maps", "locate")
MODEL_COMMANDS += ("rank", "rank-train")
QUIET_COMMANDS += ("rank",)
MODEL_COMMANDS += ("kv-cache",)
QUIET_COMMANDS += ("kv-cache",)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vrh-lmms", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text, formatter_class=DefaultsHelpFormatter)
        if only is None or only == name:
            _load(module).configure(p)
            if name in CONFIG_COMMANDS:
                p.add_argument("--config", metavar="RUN.yaml",
                               help="take the options from a run file (docs/runs.md; every finished run writes one "
                                    "into its output); flags given beside it override it")
            if name in QUIET_COMMANDS:
                p.add_argument("--verbose", "-v", action="store_true",
                               help="show lmms-eval's and the other libraries' output as it comes (default: one "
                                    "progress display, that output kept in vrh-lmms.log in the output folder)")
    return parser


def subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]


def _load(module: str):
    return importlib.import_module(f"vrh_lmms.cli.commands.{module}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `eval` hands every following argument to lmms-eval untouched (argparse would claim --model etc.).
    if argv and argv[0] == "eval" and not {"-h", "--help"} & set(argv[1:2]):
        return _guarded(lambda: _with_threads(lambda: _load("eval").passthrough(argv[1:])))
    # Configure only the chosen subcommand, so `vrh-lmms tasks-path` does not import torch-heavy modules.
    chosen = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(only=chosen if chosen in COMMANDS else "__none__")
    if chosen in CONFIG_COMMANDS and argv and argv[0] == chosen:
        try:
            argv = runfile.expand(argv, subparser(parser, chosen))
        except VRHError as exc:
            print(f"vrh-lmms: error: {exc}", file=sys.stderr)
            return 2
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 0
    run = lambda: _load(COMMANDS[args.command][0]).run(args)  # noqa: E731
    if args.command not in RANK_COMMANDS:
        run = _one_process(args.command, run)
    if args.command in QUIET_COMMANDS:
        code = _guarded(lambda: _in_session(run, args.verbose, threads=args.command in MODEL_COMMANDS))
    else:
        code = _guarded(lambda: _with_threads(run) if args.command in MODEL_COMMANDS else run())
    if code == 0 and args.command in CONFIG_COMMANDS:
        _write_run_file(args, subparser(parser, args.command))
    return code


def _write_run_file(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """A finished run keeps its run file beside its outputs (rank 0 only; nothing when there is no output)."""
    from vrh_lmms.harness.distributed import is_main

    if not is_main():
        return
    target = runfile.run_file_path(args.command, args.output)
    if target.parent.is_dir() and (args.command != "discover" or Path(args.output).is_file()):
        runfile.write(args.command, args, parser)


def _one_process(command: str, call):
    def checked():
        from vrh_lmms.harness.distributed import world_size

        if world_size() > 1:
            raise VRHError(f"`vrh-lmms {command}` runs in one process; start it without torchrun / accelerate launch "
                           f"(discover, sweep, steer and patch run on several ranks: docs/scaling.md)")
        return call()

    return checked


def _in_session(call, verbose: bool, threads: bool):
    from vrh_lmms.base import console

    with console.session(verbose=verbose):
        return _with_threads(call) if threads else call()


def _with_threads(call):
    from vrh_lmms.model.device import choose_threads

    choose_threads()
    return call()


def _guarded(call) -> int:
    try:
        return int(call() or 0)
    except VRHError as exc:
        from vrh_lmms.harness.distributed import error_prefix

        print(f"vrh-lmms: error: {error_prefix()}{exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vrh-lmms: interrupted; finished work is kept and a rerun resumes", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
