"""`vrh-lmms make-tiny FAMILY OUT_DIR`: a tiny random-weight checkpoint of a real transformers VLM class."""

from __future__ import annotations

import argparse

from vrh_lmms.model.tiny.registry import TINY_FACTORIES, build_tiny


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("family", choices=sorted(TINY_FACTORIES), help="model family")
    parser.add_argument("out_dir", help="folder to write (config, safetensors, tokenizer, processor)")
    parser.add_argument("--seed", type=int, default=0, help="weight-init seed (default 0)")
    parser.add_argument("--force", action="store_true", help="replace a tiny checkpoint written into OUT_DIR before")


def run(args: argparse.Namespace) -> int:
    path = build_tiny(args.family, args.out_dir, seed=args.seed, force=args.force)
    print(path)
    return 0
