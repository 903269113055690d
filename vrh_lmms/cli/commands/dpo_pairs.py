"""`vrh-lmms dpo-pairs SWEEP_DIR --config top20 --output pairs.jsonl`: TRL-ready preference pairs (correct answer
vs the head-ablated model's wrong answer) from a sweep's samples. Format and caveats: docs/reports.md."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vrh_lmms.base import owned
from vrh_lmms.base.errors import VRHError
from vrh_lmms.runs.dpo import (
    CHOSEN_MODES,
    PairOptions,
    build_pairs,
    images_dir_for,
    is_pair_images,
    is_pairs_file,
    write_pairs,
)


def _box_param(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep_dir", help="sweep folder (configs/<id>/results.json + samples_<task>.jsonl)")
    parser.add_argument("--config", required=True, help="ablated configuration id whose wrong answers are rejected")
    parser.add_argument("--output", "-o", required=True, help="JSONL file to write")
    parser.add_argument("--task", action="append", default=[], help="only this task (repeatable; default all)")
    parser.add_argument("--chosen", choices=CHOSEN_MODES, default="auto",
                        help="auto: baseline answer when it was correct, else ground truth (default); "
                             "baseline: only pairs with a correct baseline answer; ground-truth: always ground truth")
    parser.add_argument("--image-root", type=Path, default=None,
                        help="folder of the dataset's images (samples files carry none; synthetic tasks need none: "
                             "their scenes are regenerated; default: none)")
    parser.add_argument("--image-pattern", default="{image_id}.jpg",
                        help="file name under --image-root; fields {image_id}, {doc_id}, {task} (default "
                             "'{image_id}.jpg')")
    parser.add_argument("--no-check-images", action="store_true",
                        help="write --image-root paths without checking that the files exist")
    parser.add_argument("--skip-missing-images", action="store_true",
                        help="drop pairs whose image cannot be found instead of failing")
    parser.add_argument("--convention", default=None,
                        help="box convention for ground-truth answers (default: vrh_record.convention)")
    parser.add_argument("--box-param", type=_box_param, action="append", default=[], metavar="KEY=VALUE",
                        help="box convention parameter, e.g. max_pixels=1605632 for Qwen2.5-VL (repeatable)")
    parser.add_argument("--force", action="store_true", help="replace pairs (and their images) written here before")


def run(args: argparse.Namespace) -> int:
    output = Path(args.output)
    images_dir = images_dir_for(output)
    # Only our own earlier pairs (and their image folder) are replaced, and only with --force.
    owned.prepare_file(output, is_pairs_file, force=args.force, what="preference pairs")
    if images_dir.exists() and any(images_dir.iterdir()):
        owned.refuse_foreign(images_dir, [] if is_pair_images(images_dir) else [images_dir])
        if not args.force:
            raise VRHError(f"{images_dir} holds images of earlier pairs; choose another --output or pass --force "
                           f"to replace them")
    options = PairOptions(
        config=args.config,
        tasks=tuple(args.task),
        chosen=args.chosen,
        image_root=args.image_root,
        image_pattern=args.image_pattern,
        check_images=not args.no_check_images,
        skip_missing_images=args.skip_missing_images,
        convention=args.convention,
        box_params=dict(args.box_param),
    )
    if args.force:  # checked above to be our earlier pairs and their images
        owned.remove(output)
        owned.remove(images_dir)
    rows, stats = build_pairs(args.sweep_dir, options, images_dir)
    if not rows:
        skipped = {k: v for k, v in stats.to_dict().items() if k.startswith("skipped_") and v}
        why = ", ".join(f"{k[len('skipped_'):].replace('_', ' ')}: {v}" for k, v in skipped.items())
        raise VRHError(f"no preference pairs from {args.config}: {stats.ablated_wrong} wrong answers over "
                       f"{stats.docs} docs" + (f", all skipped ({why})" if why else "") + "; nothing was written")
    write_pairs(rows, output)
    print(f"{output}: {stats.written} pairs ({stats.chosen_baseline} chosen = baseline answer, "
          f"{stats.chosen_ground_truth} chosen = ground truth) from {stats.ablated_wrong} wrong answers of "
          f"{args.config} over {stats.docs} docs")
    skipped = {k: v for k, v in stats.to_dict().items() if k.startswith("skipped_") and v}
    if skipped:
        print("skipped: " + ", ".join(f"{k[len('skipped_'):].replace('_', ' ')}: {v}" for k, v in skipped.items()))
    if stats.images_written:
        print(f"{stats.images_written} images written into {images_dir} (decoded from the samples, or synthetic "
              f"scenes regenerated)")
    return 0
