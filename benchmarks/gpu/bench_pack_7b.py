"""Packed vs sequential head-set evaluation at Qwen2.5-VL-7B shape (random weights) on one GPU.

For M = 4, 8, 16, 32 head configurations (baseline + M-1 random sets of `--heads` heads, every fourth mean-ablated)
on one request at a time (batch size 1, as sweeps of 7B models run):
- sequential: each configuration folded into the weights, one `generate` each (what `--pack 1` does);
- packed: one `PackedGenerate` call answering all M (vision encoded once, M rows), then M-1 replays (what the
  other M-1 lmms-eval passes of a pack cost);
side by side, alternating order, `--reps` times per request, with CUDA synchronised around every timing. Printed per
image size and M: median times, the ratio sequential / packed, peak GPU memory of each side, and how many of the M
answers are token-identical (bf16 kernels depend on the batch size, so a packed row may split from its sequential
twin at a near-tie: the logit gap at every split, under the row's own head set, is printed).

`--check` instead runs the exactness check in float32 at the real 7B width with `--layers` layers: every packed
answer must equal the sequential one, or split at a near-tie (gap < 1e-3); exit 1 otherwise.

    python benchmarks/gpu/bench_pack_7b.py --check --layers 4
    python benchmarks/gpu/bench_pack_7b.py --sizes 640x480,1280x960 --packs 4,8,16,32 --json out.json
    python benchmarks/gpu/bench_pack_7b.py --device cpu --shape tiny --packs 2,4 --new-tokens 4   # smoke test
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_capture import SHAPE_7B  # noqa: E402

GAP_TOLERANCE = 1e-3  # logit gap below which a split counts as a near-tie (bf16 logits are ~1e-2 coarse anyway)


def build(shape: str, device: str, dtype: torch.dtype, layers: int | None, max_tokens: int):
    from transformers import Qwen2_5_VLForConditionalGeneration

    from vrh_lmms.model.tiny.qwen2_5_vl import make_config, make_processor, make_tokenizer

    tokenizer = make_tokenizer()
    processor = make_processor(tokenizer, max_pixels=28 * 28 * max_tokens)
    spec = SHAPE_7B if shape == "7b" else {}
    text = dict(spec.get("text") or {})
    if layers:
        text["num_hidden_layers"] = layers
    config = make_config(tokenizer, text or None, spec.get("vision"))
    if "vocab_size" in spec:
        config.text_config.vocab_size = spec["vocab_size"]
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration._from_config(config, attn_implementation="sdpa", dtype=dtype)
    return model.eval(), processor


def request(processor, size: tuple[int, int], seed: int, device: str) -> dict[str, torch.Tensor]:
    """One grounding-style request on a synthetic scene of the given size (width, height)."""
    from vrh_lmms.base.synth.scenes import SceneConfig, generate_scene
    from vrh_lmms.model.tiny.inputs import render_prompt, scene_messages

    scene = generate_scene(seed, 0, SceneConfig(image_size=max(size)))
    image = scene.image.resize(size)
    prompt = render_prompt(processor, scene_messages(scene.expression, image))
    batch = processor(text=[prompt], images=[image], return_tensors="pt")
    return {k: v.to(device) for k, v in batch.items()}


def head_sets(geometry, m: int, n_heads: int, seed: int):
    from vrh_lmms.base.heads import HeadRef
    from vrh_lmms.model.ablation import RowConfig

    rng = random.Random(seed)
    every = [HeadRef(layer, head) for layer in range(geometry.layers) for head in range(geometry.heads)]
    out = [RowConfig(())]
    for i in range(1, m):
        out.append(RowConfig(tuple(rng.sample(every, min(n_heads, len(every)))), "mean" if i % 4 == 3 else "zero"))
    return out


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def peak_reset(device: str) -> None:
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()


def peak_gib(device: str) -> float | None:
    return torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None


def sequential(model, decoder, batch, configs, means, gen) -> tuple[list[torch.Tensor], float]:
    from vrh_lmms.model.ablation import Ablator

    ablator, outs = Ablator(model, decoder), []
    sync(gen["device"])
    start = time.perf_counter()
    try:
        for cfg in configs:
            ablator.apply(cfg.heads, mode=cfg.mode, means=means)
            outs.append(model.generate(**batch, **gen["kwargs"]))
    finally:
        ablator.restore()
    sync(gen["device"])
    return outs, time.perf_counter() - start


def packed(model, decoder, batch, configs, means, gen) -> tuple[list[torch.Tensor], float, object]:
    from vrh_lmms.model.packing import PackedGenerate

    pack = PackedGenerate(model, decoder, configs, means=means)
    outs = []
    sync(gen["device"])
    start = time.perf_counter()
    with pack:
        for j in range(len(configs)):
            pack.serve(j)
            outs.append(model.generate(**batch, **gen["kwargs"]))
    sync(gen["device"])
    return outs, time.perf_counter() - start, pack.stats


def splits(model, decoder, batch, configs, means, seq, pck) -> list[float]:
    """Logit gap at the first split of every packed answer that differs from its sequential twin."""
    from vrh_lmms.model.ablation import ablated
    from vrh_lmms.model.packing import divergence_gap

    gaps = []
    for cfg, a, b in zip(configs, seq, pck):
        if torch.equal(a, b):
            continue
        with ablated(model, cfg.heads, mode=cfg.mode, means=means):
            gaps.append(divergence_gap(model, batch, a, b, 0))
    return gaps


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--shape", default="7b", choices=("7b", "tiny"))
    p.add_argument("--check", action="store_true", help="float32 exactness check instead of the benchmark")
    p.add_argument("--layers", type=int, default=None, help="text layers (default: all; --check: 4)")
    p.add_argument("--sizes", default="640x480,1280x960", help="image sizes WxH (RefCOCO images are ~640x480)")
    p.add_argument("--packs", default="4,8,16,32")
    p.add_argument("--heads", type=int, default=20, help="heads per ablated configuration")
    p.add_argument("--new-tokens", type=int, default=32, help="tokens per answer (forced: random weights)")
    p.add_argument("--requests", type=int, default=1, help="different requests (scenes) per size")
    p.add_argument("--reps", type=int, default=2, help="timed repetitions per request and M")
    p.add_argument("--json")
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    dtype = torch.float32 if args.check or args.device == "cpu" else torch.bfloat16
    layers = args.layers or (4 if args.check else None)
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    packs = [int(m) for m in args.packs.split(",")]
    max_tokens = max(w * h for w, h in sizes) // (28 * 28) + 64
    from vrh_lmms.model.backbone import locate_decoder

    model, processor = build(args.shape, args.device, dtype, layers, max_tokens)
    decoder = locate_decoder(model)
    g = decoder.geometry
    means = 0.02 * torch.randn(g.layers, g.heads, g.head_dim, generator=torch.Generator().manual_seed(1))
    gen = {"device": args.device, "kwargs": {"do_sample": False, "num_beams": 1, "max_new_tokens": args.new_tokens,
                                             "min_new_tokens": args.new_tokens}}
    print(f"{torch.cuda.get_device_name() if args.device == 'cuda' else 'CPU'}; torch {torch.__version__}; "
          f"{args.shape} shape, {g.layers} layers x {g.heads} heads (kv {g.kv_heads}) of {g.head_dim}; {dtype}; "
          f"{args.new_tokens} new tokens; {args.heads} heads per configuration"
          + (f"; {torch.cuda.memory_allocated() / 2**30:.1f} GiB resident (weights)" if args.device == "cuda" else ""))
    rows, ok = [], True
    with torch.no_grad():
        for size in sizes:
            batches = [request(processor, size, seed, args.device) for seed in range(args.requests)]
            warm = head_sets(g, 2, args.heads, 99)
            sequential(model, decoder, batches[0], warm, means, gen)
            packed(model, decoder, batches[0], warm, means, gen)
            for m in packs:
                configs = head_sets(g, m, args.heads, m)
                t_seq, t_pck, gaps, same, peaks = [], [], [], 0, {"sequential": 0.0, "packed": 0.0}
                for batch in batches:
                    for rep in range(args.reps):
                        order = ("sequential", "packed") if rep % 2 == 0 else ("packed", "sequential")
                        for side in order:
                            peak_reset(args.device)
                            if side == "sequential":
                                seq, t = sequential(model, decoder, batch, configs, means, gen)
                                t_seq.append(t)
                            else:
                                pck, t, stats = packed(model, decoder, batch, configs, means, gen)
                                t_pck.append(t)
                                if stats.packed_calls != 1 or stats.replayed != m - 1:
                                    print(f"FAIL: pack stats {stats}")
                                    ok = False
                            peaks[side] = max(peaks[side], peak_gib(args.device) or 0.0)
                    same += sum(torch.equal(a, b) for a, b in zip(seq, pck))
                    gaps += splits(model, decoder, batch, configs, means, seq, pck)
                if args.check and not all(gap < GAP_TOLERANCE for gap in gaps):
                    print(f"FAIL: a packed answer split from its sequential twin at a logit gap >= {GAP_TOLERANCE}")
                    ok = False
                row = {"size": f"{size[0]}x{size[1]}", "tokens": int(batches[0]["input_ids"].shape[1]), "M": m,
                       "sequential_s": statistics.median(t_seq), "packed_s": statistics.median(t_pck),
                       "ratio": statistics.median(t_seq) / statistics.median(t_pck),
                       "peak_gib_sequential": peaks["sequential"], "peak_gib_packed": peaks["packed"],
                       "identical": same, "answers": m * len(batches), "split_gaps": gaps}
                rows.append(row)
                print(f"{row['size']} ({row['tokens']} prompt tokens) M={m:>2}: sequential {row['sequential_s']:.2f} s,"
                      f" packed {row['packed_s']:.2f} s, ratio {row['ratio']:.2f}; peak GiB {peaks['sequential']:.1f}"
                      f" / {peaks['packed']:.1f}; identical answers {same}/{m * len(batches)}"
                      + (f"; split gaps max {max(gaps):.2e}" if gaps else ""), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "check": args.check, "dtype": str(dtype)}, indent=1))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
