"""Train the tiny demo VLM (the shipped design, research/demo_model/designs.py): the trainer behind
`vrh-lmms train-tiny`, which runs this module from a clone; run it directly from the repository root:

    python -m research.train_tiny --out DIR [--seed N] [--backbone CK --vision-seed S] [--resume] [--force]

It takes `vrh-lmms train-tiny`'s options (the same `configure`) and refuses bad input in one line, before any
folder is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from packaging.version import Version

from research.demo_model import run_state
from research.demo_model.designs import DESIGNS, LATEST, get_design
from research.demo_model.train import kept_points, train
from vrh_lmms.base import atomic, owned
from vrh_lmms.base.errors import VRHError
from vrh_lmms.cli.commands.train_tiny import MIN_TRANSFORMERS, configure


def check_transformers(found: str) -> None:
    if Version(found) < Version(MIN_TRANSFORMERS):
        raise VRHError(f"train-tiny needs transformers >= {MIN_TRANSFORMERS} (it passes pre-encoded images as "
                       f"`mm_encoder_outputs`); this environment has {found}")


def train_tiny(args: argparse.Namespace) -> int:
    # deferred: keeps `python -m research.train_tiny --help` free of transformers
    import transformers

    check_transformers(transformers.__version__)
    args.design = args.design or LATEST
    if args.design not in DESIGNS:
        raise VRHError(f"unknown design {args.design!r}; known: {', '.join(DESIGNS)}")
    if args.backbone and not (Path(args.backbone) / "model.safetensors").is_file():
        raise VRHError(f"--backbone {args.backbone} holds no model.safetensors (expected a run's backbone/ folder)")
    design = get_design(args.design)
    keep = [p for p in args.keep_state_at.split(",") if p.strip()]

    try:  # refused before any folder is written (prepare_output below may create it), naming the bad point
        kept_points(design, keep)
    except ValueError as exc:
        raise VRHError(f"--keep-state-at: {exc}") from None

    out = Path(args.out)
    if args.resume:  # the run saves its state at every evaluation and writes its file listing only when it ends
        if not run_state.resume_path(out).is_file():
            raise VRHError(f"--resume: {out} holds no unfinished run (no {run_state.RESUME_FILE})")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m research.train_tiny", description=__doc__.splitlines()[0])
    configure(parser)
    try:
        return train_tiny(parser.parse_args(argv))
    except VRHError as exc:
        print(f"vrh-lmms: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
