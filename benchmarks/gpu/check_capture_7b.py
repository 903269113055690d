"""GPU check at Qwen2.5-VL-7B width: capture equals eager `output_attentions` and leaves logits untouched.

Random weights, float32 (the exactness claim is for float32), the real 7B text width (28 heads, 4 KV heads,
head_dim 128) with fewer layers so eager attention maps fit easily. Prints the worst mass / argmax disagreement and
exits 1 when the check fails.

    python benchmarks/gpu/check_capture_7b.py --device cuda --layers 4 --side 644
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_capture import SHAPE_7B, make_inputs, make_plans


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--side", type=int, default=644)
    p.add_argument("--shape", default="7b", choices=("7b", "tiny"))
    args = p.parse_args()
    from transformers import Qwen2_5_VLForConditionalGeneration

    from vrh_lmms.model.capture import capture_attention
    from vrh_lmms.model.tiny.qwen2_5_vl import make_config, make_processor, make_tokenizer

    tok = make_tokenizer()
    processor = make_processor(tok, max_pixels=28 * 28 * 4096)
    text = dict(SHAPE_7B["text"], num_hidden_layers=args.layers) if args.shape == "7b" else None
    vision = dict(SHAPE_7B["vision"], depth=4, fullatt_block_indexes=[3]) if args.shape == "7b" else None
    config = make_config(tok, text, vision, initializer_range=0.02)
    torch.manual_seed(0)
    with torch.device(args.device):
        model = Qwen2_5_VLForConditionalGeneration._from_config(config, attn_implementation="sdpa",
                                                                dtype=torch.float32).eval()
    batch = make_inputs(processor, args.side, args.device)
    plan = dataclasses.replace(make_plans(model, processor, batch, 20, args.side)["grid"], argmax=True)
    with torch.no_grad():
        plain = model(**batch, use_cache=False).logits
        with capture_attention(model, plan) as handle:
            captured = model(**batch, use_cache=False).logits
        result = handle.result()
        model.set_attn_implementation({"text_config": "eager"})
        attn = torch.stack(model(**batch, use_cache=False, output_attentions=True).attentions, 1)  # b L H T T
        model.set_attn_implementation({"text_config": "sdpa"})
    rows = attn[0][:, :, plan.query_positions[0]]  # L H Q T
    worst = 0.0
    for name, keys in plan.key_sets.items():
        ref = (rows * keys[0].float()).sum(-1)
        worst = max(worst, float((ref - result.mass[name][0]).abs().max()))
    picked = torch.gather(rows, -1, result.argmax[0][..., None])[..., 0]
    argmax_ok = bool((picked >= rows.amax(-1) - 1e-6).all())
    logits_equal = bool(torch.equal(plain, captured))
    print(f"T={batch['input_ids'].shape[1]} image tokens={int(plan.key_sets['image'].sum())} "
          f"max |mass - eager|={worst:.2e} argmax ok={argmax_ok} logits bit-equal={logits_equal}")
    ok = worst <= 1e-5 and argmax_ok and logits_equal
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
