"""`vrh-lmms rank-train --model-dir DIR --heads-file H --k K --data synth --n N --output OUT`: fine-tune with a
listwise ranking loss on the chosen heads' attention over candidate images plus the answer's LM loss (HF Trainer;
`--heads random --seed S` is the random-heads control). Details: docs/applications.md, "Ranking-loss training"."""

from __future__ import annotations

import argparse

from vrh_lmms.base.errors import VRHError
from vrh_lmms.runs.rank.loss import DEFAULT_TEMPERATURE
from vrh_lmms.runs.rank.train import (
    DEFAULT_LM_WEIGHT,
    DEFAULT_LR,
    HEAD_CHOICES,
    RECORD_FILE,
    TRAIN_SCENE_START,
    RankTrainOptions,
    train,
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-dir", required=True, help="checkpoint folder to fine-tune (a vrh_qwen25 model)")
    parser.add_argument("--heads-file", required=True, help="heads file whose ranking gives the top-k heads")
    parser.add_argument("--k", type=int, default=5, help="heads the ranking loss trains (default 5)")
    parser.add_argument("--heads", choices=HEAD_CHOICES, default="top",
                        help="top: the heads file's top-k (default); random: k random live heads (the control)")
    parser.add_argument("--seed", type=int, default=0, help="training seed (data order) and random-heads draw")
    parser.add_argument("--data", default="synth", help="training queries: 'synth' (the only source so far)")
    parser.add_argument("--n", type=int, default=200, help="training queries (default 200)")
    parser.add_argument("--candidates", type=int, default=4, help="candidate images per query (default 4)")
    parser.add_argument("--scene-seed", type=int, default=None, help="scene stream seed (default the held-out 2)")
    parser.add_argument("--scene-start", type=int, default=TRAIN_SCENE_START,
                        help=f"first scene id (default {TRAIN_SCENE_START}; lower ids of the held-out seed are "
                             f"evaluation scenes and are refused)")
    parser.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE,
                        help=f"softmax temperature over candidate masses (default {DEFAULT_TEMPERATURE:g})")
    parser.add_argument("--lm-weight", type=float, default=DEFAULT_LM_WEIGHT,
                        help=f"weight of the answer's LM loss (default {DEFAULT_LM_WEIGHT:g})")
    parser.add_argument("--lr", type=float, default=DEFAULT_LR, help=f"learning rate (default {DEFAULT_LR:g})")
    parser.add_argument("--epochs", type=int, default=1, help="epochs over the queries (default 1)")
    parser.add_argument("--grad-accum", type=int, default=1, help="queries per optimiser step (default 1)")
    parser.add_argument("--freeze-vision", action="store_true", help="keep the vision tower's weights fixed")
    parser.add_argument("--allow-cross-model", action="store_true", help="use a heads file of another geometry")
    parser.add_argument("--output", "-o", required=True, help="folder for the fine-tuned checkpoint (new or empty)")
    parser.add_argument("--force", action="store_true",
                        help="replace a checkpoint that rank-train wrote into --output before")


def run(args: argparse.Namespace) -> int:
    if args.data != "synth":
        raise VRHError(f"--data {args.data!r}: rank-train reads 'synth' only (MMDocIR training is not built)")
    options = RankTrainOptions(k=args.k, heads=args.heads, seed=args.seed, n=args.n, candidates=args.candidates,
                               scene_seed=args.scene_seed, scene_start=args.scene_start,
                               temperature=args.temperature, lm_weight=args.lm_weight, lr=args.lr,
                               epochs=args.epochs, grad_accum=args.grad_accum, freeze_vision=args.freeze_vision)
    result = train(args.model_dir, args.heads_file, args.output, options, force=args.force,
                   allow_cross_model=args.allow_cross_model)
    rec = result.record
    steps = rec["steps"]
    tail = steps[-max(1, len(steps) // 5):]

    def mean(key: str) -> float:
        return sum(s[key] for s in tail) / len(tail) if tail else float("nan")

    print(f"rank-train: {rec['data']['queries']} queries, heads {' '.join(rec['heads'])}, "
          f"{rec['settings']['steps']} steps; last fifth: rank loss {mean('rank_loss'):.3f}, LM loss "
          f"{mean('lm_loss'):.3f}, gold ranked first {100 * mean('gold_top'):.0f}%")
    print(f"wrote {result.output} (checkpoint: pretrained={result.output}) and {result.output / RECORD_FILE}")
    return 0
