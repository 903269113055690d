"""`vrh-lmms train-tiny --out DIR --seed N`: train a tiny demo VLM (the shipped design, research/demo_model/designs.py).

The trainer lives in the repository's research/ folder, not in the installed package: this command runs research's
own command, `python -m research.train_tiny` (same options), in a process of its own from a clone, and says so in one
line elsewhere. The package never imports research/ (tests/unit/test_import_cycles.py)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import vrh_lmms
from vrh_lmms.base.errors import VRHError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="checkpoint folder to write (model, tokenizer, processor, spec)")
    parser.add_argument("--seed", type=int, default=0, help="training seed: init, data streams, head dropout")
    parser.add_argument("--design", default=None,
                        help="design to train (default and only choice: the shipped model's); research designs "
                             "train with `python -m research.train` from the repository")
    parser.add_argument("--backbone", default=None,
                        help="text-pretrained checkpoint (a run's backbone/ folder): skip the text phase "
                             "(default: none, train the text phase)")
    parser.add_argument("--vision-seed", type=int, default=None,
                        help="seed of the vision tower and visual data (default --seed): VLMs sharing a backbone")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--force", action="store_true", help="replace a model this command wrote into --out before")
    parser.add_argument("--resume", action="store_true",
                        help="continue the unfinished run in --out (same design, seed and --backbone) where it stood")
    parser.add_argument("--keep-state-at", default="", metavar="PHASE:STEP,...",
                        help="evaluation points (e.g. joint:4500) whose resume state is also kept in --out, as "
                             "resume_state_PHASE_STEP.pt: a later design identical until there continues it (default: "
                             "none)")


# The trainer feeds the vision tower's output to the model once per batch (`mm_encoder_outputs`, transformers 5.18+;
# older releases would take the keyword without using it). Everything else in vrh-lmms runs from transformers 5.0.
MIN_TRANSFORMERS = "5.18"
TRAINER = "research.train_tiny"  # the research folder's own command, which this one runs


def clone_root() -> Path:
    """The clone whose research/ folder holds the trainer: the current folder, or the one this package runs from
    (an editable install); the wheel holds no trainer."""
    for root in (Path.cwd(), Path(vrh_lmms.__file__).resolve().parents[1]):
        if (root / "research" / "train_tiny.py").is_file():
            return root
    raise VRHError("train-tiny runs the demo model's trainer, which lives in the repository's research/ folder and "
                   "is not installed with the package: run it from a clone of the repository, from its root "
                   "(`git clone ... && cd vrh-lmms && vrh-lmms train-tiny --out DIR`)")


def as_argv(args: argparse.Namespace) -> list[str]:
    """`args` back as this command's options (those `configure` declares), for the trainer's own parser."""
    parser = argparse.ArgumentParser()
    configure(parser)
    argv: list[str] = []
    for action in parser._actions:
        value = getattr(args, action.dest, None)
        if not action.option_strings or action.dest == "help" or value is None or value is False:
            continue
        argv += [action.option_strings[-1]] + ([] if value is True else [str(value)])
    return argv


def run(args: argparse.Namespace) -> int:
    """Runs `python -m research.train_tiny` from the clone (its refusals print their own one line)."""
    root = clone_root()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", TRAINER, *as_argv(args)], env=env).returncode
