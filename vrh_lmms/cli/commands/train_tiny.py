"""`vrh-lmms train-tiny --out DIR --seed N`: train a tiny demo VLM (the shipped design, research/demo_model/designs.py).

The trainer lives in the repository's research/ folder, not in the installed package: this command runs it from a
clone (the repository root on the Python path), and says so in one line elsewhere."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from packaging.version import Version

import vrh_lmms
from vrh_lmms.base import atomic, owned
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


def check_transformers(found: str) -> None:
    if Version(found) < Version(MIN_TRANSFORMERS):
        raise VRHError(f"train-tiny needs transformers >= {MIN_TRANSFORMERS} (it passes pre-encoded images as "
                       f"`mm_encoder_outputs`); this environment has {found}")


def trainer():
    """The research/demo_model package (imported here, not at the top: the wheel does not hold it), found on the
    Python path or in the clone this package runs from (an editable install) or the current folder."""

    for root in (Path.cwd(), Path(vrh_lmms.__file__).resolve().parents[1]):
        if (root / "research" / "demo_model" / "__init__.py").is_file() and str(root) not in sys.path:
            sys.path.append(str(root))
            break
    try:
        return tuple(importlib.import_module(f"research.demo_model.{name}")
                     for name in ("designs", "train", "run_state"))
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("research"):
            raise
        raise VRHError("train-tiny runs the demo model's trainer, which lives in the repository's research/ folder and "
                       "is not installed with the package: run it from a clone of the repository, from its root "
                       "(`git clone ... && cd vrh-lmms && vrh-lmms train-tiny --out DIR`)") from None


def run(args: argparse.Namespace) -> int:
    # deferred: keeps `vrh-lmms train-tiny --help` free of transformers
    import transformers

    check_transformers(transformers.__version__)
    designs, training, run_state = trainer()
    DESIGNS, LATEST, get_design = designs.DESIGNS, designs.LATEST, designs.get_design
    kept_points, train = training.kept_points, training.train

    args.design = args.design or LATEST
    if args.design not in DESIGNS:
        raise VRHError(f"unknown design {args.design!r}; known: {', '.join(DESIGNS)}")
    if args.backbone and not (Path(args.backbone) / "model.safetensors").is_file():
        raise VRHError(f"--backbone {args.backbone} holds no model.safetensors (expected a run's backbone/ folder)")
    design = get_design(args.design)
    keep = [p for p in args.keep_state_at.split(",") if p.strip()]
    RESUME_FILE, resume_path = run_state.RESUME_FILE, run_state.resume_path

    try:  # refused before any folder is written (prepare_output below may create it), naming the bad point
        kept_points(design, keep)
    except ValueError as exc:
        raise VRHError(f"--keep-state-at: {exc}") from None

    out = Path(args.out)
    if args.resume:  # the run saves its state at every evaluation and writes its file listing only when it ends
        if not resume_path(out).is_file():
            raise VRHError(f"--resume: {out} holds no unfinished run (no {RESUME_FILE})")
    else:  # only a folder this command wrote (its file listing says so) is replaced, and only with --force
        owned.prepare_output(out, owned.listing_layout(out), force=args.force, what="a trained tiny model",
                             option="--out")
    summary = train(design, out, args.seed, backbone=args.backbone, vision_seed=args.vision_seed,
                    threads=args.threads, resume=args.resume, keep_states=keep, log=lambda s: print(s, flush=True))
    atomic.follow_umask_tree(out)  # save_pretrained writes its safetensors 0600
    owned.write_listing(out)
    final = summary.get("final") or {}
    print(f"wrote {out} in {summary['seconds'] / 60:.1f} min; held-out grounding Acc@0.5 "
          f"{100 * final.get('acc50', float('nan')):.1f}% (n={design.eval_n})")
    return 0
