"""Forward-time cost of head ablation: masked / unmasked time ratios for the fold and hook methods.

The conditions (unmasked, fold, hook, and a second unmasked "control" whose ratio to unmasked is the noise floor)
run side by side in one process: every round times each of them in a shuffled order, with the ablation switched
outside the timed region, and the report gives medians of the per-round ratios (robust to drift of a shared
machine) next to the ratio of median times. Fold edits o_proj weights once, so its forward is the unmasked forward
(target ratio <= 1.01); the hook clones o_proj's input in every ablated layer.

Presets (random weights of the real Qwen2.5-VL class, built in memory; no download):
  cpu    (default) a small-but-not-trivial shape: 4 layers, hidden 512, 8 heads of 64, 2 vision blocks; CPU, fp32
  gpu7b  Qwen2.5-VL-7B's shape: 28 layers, hidden 3584, 28 heads (4 kv) of 128, 32 vision blocks of 1280;
         CUDA, bf16 (needs ~20 GB of GPU memory)

  python benchmarks/bench_ablation_overhead.py                       # CPU preset
  python benchmarks/bench_ablation_overhead.py --preset gpu7b        # on a GPU machine
  python benchmarks/bench_ablation_overhead.py --rounds 60 --heads 20 --json out.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from typing import Any

import torch

PRESETS: dict[str, dict[str, Any]] = {
    "cpu": dict(
        text=dict(hidden_size=512, intermediate_size=1376, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=4, head_dim=64),
        vision=dict(depth=2, hidden_size=128, intermediate_size=256, num_heads=4, fullatt_block_indexes=[1]),
        device="cpu", dtype="float32", image=224, batch=1, heads=8, rounds=30, warmup=3, inner=3),
    "gpu7b": dict(
        text=dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                  num_key_value_heads=4, head_dim=128),
        vision=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16,
                    fullatt_block_indexes=[7, 15, 23, 31]),
        device="cuda", dtype="bfloat16", image=448, batch=1, heads=20, rounds=30, warmup=5, inner=3),
}


def build_model(preset: dict[str, Any], device: str, dtype: torch.dtype):
    """Random-weight Qwen2.5-VL of the preset's shape, with the tiny family's tokenizer and processor."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    from vrh_lmms.model.tiny.qwen2_5_vl import make_config, make_processor, make_tokenizer

    tokenizer = make_tokenizer()
    processor = make_processor(tokenizer, max_pixels=preset["image"] ** 2, min_pixels=preset["image"] ** 2 // 4)
    config = make_config(tokenizer, preset["text"], preset["vision"], initializer_range=0.02)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration(config).to(dtype).eval()
    return model, processor


def make_inputs(processor, preset: dict[str, Any], device: str, dtype: torch.dtype):
    from vrh_lmms.model.tiny.inputs import processor_inputs

    batch = processor_inputs(processor, n=preset["batch"], image_sizes=[preset["image"]] * preset["batch"])
    return {k: (v.to(device, dtype) if v.is_floating_point() else v.to(device)) for k, v in batch.items()}


def pick_heads(geometry, k: int, seed: int = 0):
    from vrh_lmms.base.heads.spec import random_heads

    return random_heads(geometry, min(k, geometry.total_heads), seed)


def timed_forward(model, inputs, device: str) -> float:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.inference_mode():
        model(**inputs)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def measure(model, inputs, heads, device: str, rounds: int, warmup: int, inner: int = 1,
            seed: int = 0) -> dict[str, list[float]]:
    """Interleaved rounds: each times unmasked, fold and hook in a shuffled order (the fastest of `inner`
    forwards per condition, which drops preemptions on a shared machine)."""
    from vrh_lmms.model.ablation import Ablator

    fold, hook = Ablator(model, method="fold"), Ablator(model, method="hook")
    # "control" is a second unmasked condition: its ratio to "unmasked" is the noise floor of the measurement
    conditions = {"unmasked": (None, None), "control": (None, None), "fold": (fold, heads), "hook": (hook, heads)}
    times: dict[str, list[float]] = {name: [] for name in conditions}
    rng = random.Random(seed)
    for r in range(warmup + rounds):
        order = list(conditions)
        rng.shuffle(order)
        for name in order:
            ablator, hs = conditions[name]
            if ablator is not None:
                ablator.apply(hs)
            t = min(timed_forward(model, inputs, device) for _ in range(inner))
            if ablator is not None:
                ablator.restore()
            if r >= warmup:
                times[name].append(t)
    return times


def summarize(times: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    base = times["unmasked"]
    out = {"unmasked": {"median_ms": 1000 * statistics.median(base)}}
    for name in ("control", "fold", "hook"):
        paired = [t / b for t, b in zip(times[name], base)]
        out[name] = {"median_ms": 1000 * statistics.median(times[name]),
                     "ratio_of_medians": statistics.median(times[name]) / statistics.median(base),
                     "median_paired_ratio": statistics.median(paired)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    parser.add_argument("--rounds", type=int, help="timed rounds (default: preset's)")
    parser.add_argument("--warmup", type=int, help="untimed rounds first (default: preset's)")
    parser.add_argument("--inner", type=int, help="forwards per condition per round, fastest kept (default: "
                        "preset's)")
    parser.add_argument("--heads", type=int, help="number of heads ablated, drawn at random (default: preset's)")
    parser.add_argument("--image", type=int, help="image side in pixels (default: preset's)")
    parser.add_argument("--batch", type=int, help="batch size (default: preset's)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    preset = dict(PRESETS[args.preset])
    for key in ("rounds", "warmup", "inner", "heads", "image", "batch"):
        if getattr(args, key) is not None:
            preset[key] = getattr(args, key)
    device, dtype = preset["device"], getattr(torch, preset["dtype"])
    if device == "cuda" and not torch.cuda.is_available():
        print("bench_ablation_overhead: preset gpu7b needs CUDA; none is available here", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)

    from vrh_lmms.model.backbone import locate_decoder

    model, processor = build_model(preset, device, dtype)
    inputs = make_inputs(processor, preset, device, dtype)
    geometry = locate_decoder(model).geometry
    heads = pick_heads(geometry, preset["heads"])
    times = measure(model, inputs, heads, device, preset["rounds"], preset["warmup"], preset["inner"])
    summary = summarize(times)
    tokens = int(inputs["input_ids"].shape[1])
    print(f"preset {args.preset}: {geometry.layers} layers x {geometry.heads} heads (head_dim {geometry.head_dim}), "
          f"{tokens} tokens x batch {preset['batch']}, {device} {preset['dtype']}, {len(heads)} heads ablated, "
          f"{preset['rounds']} interleaved rounds (fastest of {preset['inner']} forwards each)")
    print(f"  unmasked  {summary['unmasked']['median_ms']:9.2f} ms")
    for name in ("control", "fold", "hook"):
        s = summary[name]
        print(f"  {name:<8}  {s['median_ms']:9.2f} ms   ratio {s['median_paired_ratio']:.4f} (median of paired "
              f"ratios)   {s['ratio_of_medians']:.4f} (ratio of medians)")
    verdict = "meets" if summary["fold"]["median_paired_ratio"] <= 1.01 else "misses"
    noise = abs(summary["control"]["median_paired_ratio"] - 1)
    print(f"  fold {verdict} the <= 1.01 target; noise floor (control vs unmasked) {100 * noise:.1f}%"
          + ("; ratios within it cannot be told apart" if noise > 0.01 else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"preset": args.preset, "tokens": tokens, "heads": [str(h) for h in heads],
                       "geometry": geometry.to_dict(), "summary": summary, "times": times}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
