"""`vrh-lmms export-masked`: a complete checkpoint with the chosen heads folded out of o_proj (zeroed columns).

The result loads and runs anywhere the source does (transformers, vLLM, SGLang), without vrh-lmms; its
`vrh_masked.json` says which heads were removed.
"""

from __future__ import annotations

import argparse

from vrh_lmms.model.export import export_masked


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pretrained", required=True, help="checkpoint folder or hub id")
    parser.add_argument("--heads", required=True,
                        help="head spec: L12H3;L14H0, top<K>, random<K>, like:top<K> (top/like need --heads-file)")
    parser.add_argument("--heads-file", help="heads file from `vrh-lmms discover` (for top<K> / like:top<K>; "
                                                 "default: none)")
    parser.add_argument("--heads-cell", help="design-space cell of the heads file to rank by (default: primary)")
    parser.add_argument("--seed", type=int, default=0, help="seed of random<K> / like:top<K> (default 0)")
    parser.add_argument("--ablation", choices=("zero", "mean"), default="zero",
                        help="zero the heads (default) or replace them by their mean output (needs an o_proj bias)")
    parser.add_argument("--means-file", help="head means for --ablation mean (default: beside the heads file)")
    parser.add_argument("--allow-cross-model", action="store_true",
                        help="use a heads file made on another geometry")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="allow the checkpoint's own Python code (InternVL, Magma, Phi-4-multimodal, ...)")
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"), default="auto",
                        help="weights dtype to load and save (default: as stored)")
    parser.add_argument("--output", required=True, help="folder to write; must be empty or new")
    parser.add_argument("--force", action="store_true",
                        help="replace a checkpoint exported into --output before (anything else there is refused)")


def run(args: argparse.Namespace) -> int:
    result = export_masked(args.pretrained, args.heads, args.output, heads_file=args.heads_file, seed=args.seed,
                           ablation=args.ablation, means_file=args.means_file,
                           allow_cross_model=args.allow_cross_model, heads_cell=args.heads_cell,
                           trust_remote_code=args.trust_remote_code, dtype=args.dtype, force=args.force)
    heads = result.record["ablation"]["heads"]
    print(f"wrote {result.output}: {len(heads)} head(s) folded out ({', '.join(heads)})")
    return 0
