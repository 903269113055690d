"""`vrh-lmms` command line: one subcommand per module under `vrh_lmms.cli.commands`, imported only when used."""

from __future__ import annotations

import argparse
import copy
import errno
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vrh_lmms.base import gc_startup, runfile
from vrh_lmms.base.errors import VRHError
from vrh_lmms.cli.commands.options import add_wait_option
from vrh_lmms.cli.help_format import DefaultsHelpFormatter, sectioned_if_long
from vrh_lmms.harness.distributed import close_group, error_prefix, is_main, world_size


@dataclass(frozen=True)
class Command:
    """One subcommand: its module under vrh_lmms.cli.commands (`configure(parser)`, `run(args) -> int`), its
    heading in `vrh-lmms --help`, and what the command line does around it."""

    name: str
    module: str
    help: str
    group: str
    sets_threads: bool = False  # torch's CPU threads are chosen from the free cores first (vrh_lmms.model.device)
    ranks: bool = False  # splits its docs across torchrun / accelerate ranks (docs/scaling.md); else one process
    quiet: bool = False  # one progress display; libraries' output kept in vrh-lmms.log in the output folder
    # the option naming what the command writes: the run holds that output's lock throughout
    # (vrh_lmms.base.folder_lock) and takes --wait
    output: str | None = "output"
    # where a finished run keeps its run file (vrh_lmms.base.runfile; docs/runs.md), which also gives the command
    # `--config run.yaml`: "folder" (run.yaml in the output folder), "beside" (<output>.run.yaml next to an output
    # that is one file); None: neither (every command that runs a model has one)
    run_file: str | None = None


# The headings of `vrh-lmms --help`, in order.
GROUPS = ("Start here", "Find and test heads", "Read results", "Put heads to use", "Models and data")

TABLE: tuple[Command, ...] = (
    Command("demo", "demo", "discover, validate and report on the shipped tiny VLM (no weights, no hub)",
            "Start here", sets_threads=True, quiet=True, run_file="folder"),
    Command("discover", "discover", "score every head of a model on a grounding task and write a heads file",
            "Find and test heads", sets_threads=True, ranks=True, quiet=True, run_file="beside"),
    Command("sweep", "sweep", "evaluate baseline, top-k, random-k and layer-matched random-k head ablations",
            "Find and test heads", sets_threads=True, ranks=True, quiet=True, run_file="folder"),
    Command("steer", "steer", "steer head sets toward another object of the image (sufficiency of the heads)",
            "Find and test heads", ranks=True, quiet=True, run_file="folder"),
    Command("patch", "patch", "activation patching of every head between expressions naming two objects of an image",
            "Find and test heads", ranks=True, quiet=True, run_file="folder"),
    Command("replicate", "replicate", "the paper's protocol on one model, table by table, into one report",
            "Find and test heads", sets_threads=True, quiet=True, run_file="folder"),
    Command("eval", "eval", "run lmms-eval with vrh tasks included and the device chosen for you",
            "Find and test heads", sets_threads=True, ranks=True, output=None),
    Command("report", "report", "statistics, tables and plots from sweep or lmms-eval output folders",
            "Read results", quiet=True),
    Command("explore", "explore", "write a run's explorer page: heads, their attention, docs and boxes, drops",
            "Read results"),
    Command("heads", "heads", "show a heads file or resolve a head spec against it", "Read results", output=None),
    Command("compare-heads", "compare_heads", "top-k overlap (vs chance), Jaccard and Spearman between heads files",
            "Read results"),
    Command("score-distribution", "score_distribution", "share of heads above score thresholds, with a log-scale plot",
            "Read results"),
    Command("sample-efficiency", "sample_efficiency", "top-k overlap of rankings from n samples vs all samples",
            "Read results"),
    Command("attention-maps", "attention_maps",
            "each head's attention over the image for chosen docs: PNG per doc + grids", "Put heads to use",
            sets_threads=True, quiet=True, run_file="folder"),
    Command("locate", "locate",
            "training-free locator: boxes from the top-k heads' attention maps, Acc@0.5 vs controls",
            "Put heads to use", sets_threads=True, quiet=True, run_file="folder"),
    Command("rank", "rank",
            "heads as a ranker: candidate images ranked by attention mass, top-k vs all vs random heads",
            "Put heads to use", sets_threads=True, quiet=True, run_file="folder"),
    Command("kv-cache", "kv_cache", "VRH-aware KV cache: accuracy against image KV kept, beside random and uniform",
            "Put heads to use", sets_threads=True, quiet=True, run_file="folder"),
    Command("export-masked", "export_masked", "write a checkpoint with heads folded out of o_proj", "Put heads to use",
            sets_threads=True, run_file="folder"),
    Command("dpo-pairs", "dpo_pairs", "TRL-ready preference pairs: correct answers vs ablated answers",
            "Put heads to use"),
    Command("dpo-train", "dpo_train", "DPO fine-tune (TRL) on dpo-pairs output; the paper's recipe by default",
            "Put heads to use", sets_threads=True, run_file="folder"),
    Command("rank-train", "rank_train",
            "fine-tune (HF Trainer) with a ranking loss on the heads' attention over candidates", "Put heads to use",
            sets_threads=True, run_file="folder"),
    Command("models", "models", "every image-text-to-text model type: what works (ablation, packing, capture, "
            "discovery) and what is refused and why", "Models and data", output=None),
    Command("make-tiny", "make_tiny", "write a tiny random-weight checkpoint of a real VLM class", "Models and data",
            output="out_dir"),
    Command("train-tiny", "train_tiny", "train the tiny grounding VLM shipped with the demo (from a clone)",
            "Models and data", output="out", run_file="folder"),
    Command("synth", "synth", "write synthetic grounding data in the hub or refer layout", "Models and data",
            output="out_dir"),
    Command("tasks-path", "tasks_path", "print the folder of the plugin's lmms-eval task YAMLs", "Models and data",
            output=None),
)
BY_NAME: dict[str, Command] = {c.name: c for c in TABLE}
# name -> (module, one-line help), for callers of the earlier table
COMMANDS: dict[str, tuple[str, str]] = {c.name: (c.module, c.help) for c in TABLE}
MODEL_COMMANDS = tuple(c.name for c in TABLE if c.sets_threads)
RANK_COMMANDS = tuple(c.name for c in TABLE if c.ranks)
QUIET_COMMANDS = tuple(c.name for c in TABLE if c.quiet)
OUTPUT_OF = {c.name: c.output for c in TABLE if c.output}
CONFIG_COMMANDS = tuple(c.name for c in TABLE if c.run_file)  # take --config and write their run file

DESCRIPTION = ("Find the retrieval heads of a vision-language model, test what they do, and put them to use.\n"
               "New here? `vrh-lmms demo` runs the whole job on a shipped tiny model, in about two minutes on a CPU.")
EPILOG = "`vrh-lmms COMMAND --help` shows a command's options and their defaults. Docs: docs/ in the repository."


class _GroupedHelp(argparse.RawDescriptionHelpFormatter):
    """The top-level help lists the commands under their headings instead of argparse's one flat list."""

    def _format_action(self, action: argparse.Action) -> str:
        if isinstance(action, argparse._SubParsersAction):
            width = max(len(c.name) for c in TABLE) + 2
            lines = []
            for group in GROUPS:
                lines.append(f"\n  {group}")
                lines += [f"    {c.name:<{width}}{c.help}" for c in TABLE if c.group == group]
            return "\n".join(lines).lstrip("\n") + "\n"
        return super()._format_action(action)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vrh-lmms", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=_GroupedHelp)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for command in TABLE:
        name = command.name
        p = sub.add_parser(name, help=command.help, description=command.help,
                           formatter_class=DefaultsHelpFormatter)
        if only is None or only == name:
            configure = _load(command.module).configure
            extra = bool(command.run_file) + bool(command.output) + (name in QUIET_COMMANDS)
            view = sectioned_if_long(p, configure, extra)  # a long command's --help under headings
            configure(view)
            if command.run_file:
                view.add_argument("--config", metavar="RUN.yaml",
                               help="take the options from a run file (docs/runs.md; every finished run writes one "
                                    "into its output); flags given beside it override it (default: none)")
            if command.output:
                add_wait_option(view)
            if name in QUIET_COMMANDS:
                view.add_argument("--verbose", "-v", action="store_true",
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
        _freeze_at_exit()
        return _guarded(lambda: _with_threads(lambda: _check_torch_builds() or _load("eval").passthrough(argv[1:])))
    # Configure only the chosen subcommand, so `vrh-lmms tasks-path` does not import torch-heavy modules.
    chosen = next((a for a in argv if not a.startswith("-")), None)
    if chosen in MODEL_COMMANDS + RANK_COMMANDS and not {"-h", "--help"} & set(argv):
        code = _guarded(_check_torch_builds)  # before the command's modules import transformers
        if code:
            return code
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
    parsed = copy.deepcopy(args)  # the options as given: what the run file records (a run may fill in its own)
    run = lambda: _load(COMMANDS[args.command][0]).run(args)  # noqa: E731
    if args.command not in RANK_COMMANDS:
        run = _one_process(args.command, run)
    output = getattr(args, "output", None)  # named when a failed write does not say which file (a full disk)
    if args.command in QUIET_COMMANDS:
        session = lambda: _in_session(run, args.verbose, threads=args.command in MODEL_COMMANDS)  # noqa: E731
    else:
        session = lambda: _with_threads(run) if args.command in MODEL_COMMANDS else run()  # noqa: E731

    command = BY_NAME[args.command]
    target = _run_file_target(command, args)

    def whole_run() -> int:
        _freeze_at_exit()
        if target is not None:  # before anything loads
            runfile.check_target(target, getattr(args, "force", False))
        code = int(session() or 0)
        if code == 0 and target is not None:
            _write_run_file(command, parsed, subparser(parser, args.command), target)
        return code

    return _guarded(lambda: _locked(args, whole_run), output)


def _freeze_at_exit() -> None:
    """The interpreter's shutdown skips what the run leaves (~1 s), except in a rank of a multi-process run, which
    keeps the usual shutdown (measured in one process only)."""
    if world_size() == 1:
        gc_startup.freeze_at_exit()


def _locked(args: argparse.Namespace, call):
    """Run `call` holding the lock of the command's output (rank 0 alone: the ranks of one job share it)."""
    dest = OUTPUT_OF.get(args.command)
    if dest is None or not getattr(args, dest, None) or not is_main():
        return call()
    # deferred: keeps `vrh-lmms --help` free of filelock
    from vrh_lmms.base import folder_lock

    with folder_lock.held(getattr(args, dest), f"vrh-lmms {args.command}", wait=args.wait):
        return call()


def _run_file_target(command: Command, args: argparse.Namespace) -> Path | None:
    """Where this run's run file goes (None: the command keeps none, or no output was named)."""
    output = getattr(args, command.output, None) if command.run_file and command.output else None
    return runfile.run_file_path(output, beside=command.run_file == "beside") if output else None


def _write_run_file(command: Command, args: argparse.Namespace, parser: argparse.ArgumentParser,
                    target: Path) -> None:
    """A finished run keeps its run file beside its outputs (rank 0 only; nothing when it wrote no output)."""
    output = Path(getattr(args, command.output))
    wrote = output.is_file() if command.run_file == "beside" else output.is_dir()
    if is_main() and wrote:
        runfile.write(command.name, args, parser, target)


def _one_process(command: str, call):
    def checked():
        if world_size() > 1:
            raise VRHError(f"`vrh-lmms {command}` runs in one process; start it without torchrun / accelerate launch "
                           f"(discover, sweep, steer and patch run on several ranks: docs/scaling.md)")
        return call()

    return checked


def _in_session(call, verbose: bool, threads: bool):
    # deferred: keeps `vrh-lmms --help` free of filelock
    from vrh_lmms.base import console

    with console.session(verbose=verbose):
        return _with_threads(call) if threads else call()


def _with_threads(call):
    # deferred: keeps `vrh-lmms --help` free of torch
    from vrh_lmms.model.device import choose_threads

    choose_threads()
    return call()


def _check_torch_builds() -> None:
    """One line where torch and torchvision come from different builds, before a command that loads a model imports
    its modules (else transformers' lazy imports fail in a 90-line traceback)."""
    # deferred: keeps `vrh-lmms --help` free of torch
    from vrh_lmms.model.device import check_torch_builds

    check_torch_builds()


def _guarded(call, output: str | None = None) -> int:
    try:
        return int(call() or 0)
    except VRHError as exc:
        print(f"vrh-lmms: error: {error_prefix()}{exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vrh-lmms: interrupted; finished work is kept and a rerun resumes", file=sys.stderr)
        return 130
    except OSError as exc:
        if exc.errno not in _WRITE_ERRORS:
            raise
        where = exc.filename or (f"into {output}" if output else None)
        print(f"vrh-lmms: error: cannot write{f' {where}' if where else ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    finally:
        close_group()


# What the system says when an output cannot be written (a read-only or foreign folder, a full disk or quota): a
# place the user chose, named in one line; other OS errors keep their traceback (they are bugs to report).
_WRITE_ERRORS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT})


if __name__ == "__main__":
    sys.exit(main())
