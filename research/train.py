"""Train any research design with the package's trainer (the product's `vrh-lmms train-tiny` knows only the shipped
design):

    python -m research.train --design NAME --seed N --out DIR [--backbone CK | --init CK --after PHASE] [--resume]
"""

from __future__ import annotations

import argparse

from research.demo_model.train import train
from research.designs import get_design


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--design", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vision-seed", type=int, default=None)
    ap.add_argument("--backbone", default=None)
    ap.add_argument("--init", default=None, help="checkpoint saved at the end of phase --after of this design")
    ap.add_argument("--after", default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--resume", action="store_true", help="continue the unfinished run in --out")
    ap.add_argument("--keep-state-at", default="",
                    help="comma-separated PHASE:STEP evaluation points (e.g. joint:4000,joint:4750) whose resume state "
                         "is kept beside the run, for later designs that branch there")
    args = ap.parse_args(argv)
    try:
        design = get_design(args.design)
    except KeyError as exc:
        ap.error(exc.args[0])
    keep = [s for s in args.keep_state_at.split(",") if s.strip()]
    train(design, args.out, args.seed, backbone=args.backbone, init=args.init, after=args.after,
          vision_seed=args.vision_seed, threads=args.threads, resume=args.resume, keep_states=keep,
          log=lambda s: print(s, flush=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
