"""`vrh-lmms dpo-train PAIRS.jsonl --model-dir DIR --output OUT`: DPO (TRL's DPOTrainer) on the pairs of
`vrh-lmms dpo-pairs`, the paper's recipe by default (full fine-tune, lr 2e-7, 4 epochs). Needs the `dpo` extra.
Details: docs/applications.md, section "DPO"."""

from __future__ import annotations

import argparse

from vrh_lmms.runs.dpo_train import IMAGE_POSITIONS, PAPER_EPOCHS, PAPER_LR, RECORD_FILE, TrainOptions, train


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pairs", help="preference pairs written by `vrh-lmms dpo-pairs` (JSONL)")
    parser.add_argument("--model-dir", required=True, help="checkpoint folder to fine-tune (also the reference model)")
    parser.add_argument("--output", "-o", required=True, help="folder for the fine-tuned checkpoint (new or empty)")
    parser.add_argument("--lr", type=float, default=PAPER_LR, help=f"learning rate (default {PAPER_LR:g}, the paper's)")
    parser.add_argument("--epochs", type=int, default=PAPER_EPOCHS,
                        help=f"epochs over the pairs (default {PAPER_EPOCHS}, the paper's)")
    parser.add_argument("--beta", type=float, default=None, help="DPO beta (default: TRL's, 0.1)")
    parser.add_argument("--batch-size", type=int, default=1, help="pairs per optimiser step (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="training seed: data order (default 0)")
    parser.add_argument("--max-pairs", type=int, default=None, help="train on the first N pairs only (default: all)")
    parser.add_argument("--image-position", choices=IMAGE_POSITIONS, default="before_prompt",
                        help="where the image goes in the prompt; after_prompt for models evaluated with "
                             "image_position=after_prompt (the demo model). Default: before_prompt, as the pairs are")
    parser.add_argument("--freeze-vision", action="store_true",
                        help="keep the vision tower's weights fixed (default: every weight trains, as in the paper)")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="allow the checkpoint's own Python code (InternVL, Magma, Phi-4-multimodal, ...)")
    parser.add_argument("--force", action="store_true",
                        help="replace a checkpoint that dpo-train wrote into --output before (anything else there is "
                             "refused)")


def run(args: argparse.Namespace) -> int:
    options = TrainOptions(lr=args.lr, epochs=args.epochs, beta=args.beta, batch_size=args.batch_size,
                           seed=args.seed, max_pairs=args.max_pairs, image_position=args.image_position,
                           freeze_vision=args.freeze_vision)
    result = train(args.pairs, args.model_dir, args.output, options, force=args.force,
                   trust_remote_code=args.trust_remote_code)
    rec = result.record
    last = rec["epochs"][-1]
    loss = "n/a" if last["loss"] is None else f"{last['loss']:.4f}"
    acc = "n/a" if last["reward_accuracies"] is None else f"{last['reward_accuracies']:.2f}"
    print(f"dpo-train: {rec['pairs']['n']} pairs, {rec['settings']['epochs']} epoch(s), {rec['settings']['steps']} "
          f"steps, lr {rec['settings']['lr']:g}, beta {rec['settings']['beta']:g}; last epoch loss {loss}, reward "
          f"accuracy {acc}")
    print(f"wrote {result.output} (checkpoint: pretrained={result.output}) and {result.output / RECORD_FILE}")
    return 0
