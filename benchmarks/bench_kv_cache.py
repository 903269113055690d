"""Memory the VRH-aware KV cache really frees: claimed bytes (from the policy), the cache's tensor bytes and the
measured memory, side by side per policy and budget, in one run.

    python benchmarks/bench_kv_cache.py                             # a mid-size random Qwen2.5-VL on CPU
    python benchmarks/bench_kv_cache.py --device cuda --shape 7b    # what benchmarks/gpu/bench_kv_cache_7b.py runs
    python benchmarks/bench_kv_cache.py --modes mask,compress,compact --batch 8   # decode ms/step side by side

Accuracy-free: random weights, one synthetic image of `--side` pixels, `--new-tokens` greedy tokens. The
`retrieval` policy here ranks heads by layer (lowest first), so at budget b the top layers hold no kept group and
shrink (the memory depends only on how many layers shrink, not on which heads are chosen); `uniform` keeps the same
evenly spaced share of image tokens in every layer, so every layer shrinks. Memory: mode `compress`
(vrh_lmms.model.kvcache.apply); decode speed: every mode of `--modes` beside no compression (`none`).

Measured per configuration, each in a fresh process:
- claimed: the bytes the policy says the shrunk cache holds (`kv_bytes(..., physical_only=True)`);
- nbytes: the K/V tensors of the cache right after prefill and shrinking (tensor nbytes);
- held (CPU): resident memory after `generate` with its cache kept alive, minus before it (RSS; glibc returns freed
  large blocks because MALLOC_MMAP_THRESHOLD_ is fixed, and tracemalloc would not see torch);
  held (CUDA): torch.cuda.memory_allocated() the same way;
- decode peak: the peak memory during the decode steps over the memory held right after prefill and shrinking
  (CPU: VmHWM reset through /proc/self/clear_refs after prefill; CUDA: reset_peak_memory_stats there);
- ms/token: wall time of the decode steps per generated token (printed per mode in a second table).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_capture import SHAPE_7B, build_from_spec  # noqa: E402

SHAPES = {
    "mid": {"text": {"hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 16,
                     "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64}},
    "7b": SHAPE_7B,
}


def build(shape: str, device: str, max_tokens: int):
    return build_from_spec(SHAPES[shape], device, max_tokens)


def make_inputs(processor, side: int, device: str, batch: int = 1):
    from PIL import Image

    from vrh_lmms.model.tiny.inputs import render_prompt, scene_messages

    image = Image.new("RGB", (side, side), (90, 90, 90))
    text = render_prompt(processor, scene_messages("the red circle", image))
    inputs = processor(text=[text] * batch, images=[image] * batch, return_tensors="pt")
    return {k: v.to(device) for k, v in inputs.items()}


def make_policy(name: str, budget: float, geometry):
    from vrh_lmms.model.kvcache.policy import no_policy, retrieval_policy, uniform_policy

    if name == "none":
        return no_policy(geometry)
    if name == "uniform":
        return uniform_policy(geometry, budget)
    return retrieval_policy(geometry.all_heads(), geometry, budget)  # ranked by layer, lowest first


def _rss_kb() -> tuple[int, int]:
    with open("/proc/self/status") as f:
        status = f.read()
    return (int(re.search(r"VmHWM:\s+(\d+)", status).group(1)), int(re.search(r"VmRSS:\s+(\d+)", status).group(1)))


class _Meter:
    """Memory now / peak since `reset`, on CPU (RSS) or CUDA (allocator)."""

    def __init__(self, device: str) -> None:
        self.cuda = device == "cuda"

    def now(self) -> int:
        if self.cuda:
            torch.cuda.synchronize()
            return torch.cuda.memory_allocated()
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        return _rss_kb()[1] * 1024

    def reset(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            return
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM := VmRSS

    def peak(self) -> int:
        if self.cuda:
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated()
        return _rss_kb()[0] * 1024


def worker(args) -> dict:
    """One configuration: generate with the policy in compress mode, measure, print one JSON line."""
    from vrh_lmms.model.backbone import locate_decoder
    from vrh_lmms.model.kvcache.apply import kv_compressed

    torch.set_num_threads(args.threads)
    model, processor = build(args.shape, args.device, args.max_tokens)
    batch = make_inputs(processor, args.side, args.device, args.batch)
    geometry = locate_decoder(model).geometry
    policy = make_policy(args.worker_policy, args.worker_budget, geometry)
    gen = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False,
               return_dict_in_generate=True)
    with torch.no_grad():
        model.generate(**batch, **dict(gen, max_new_tokens=2, min_new_tokens=2))  # warm-up
    meter = _Meter(args.device)
    marks: dict[str, float] = {}

    def after_prefill(module, a, kw, out):  # runs after the compression's own hook (registered later)
        if "prefill" not in marks:
            marks["prefill"] = time.perf_counter()
            marks["after_prefill"] = meter.now()
            meter.reset()

    with kv_compressed(model, policy, args.worker_mode) as comp, torch.no_grad():
        handle = model.register_forward_hook(after_prefill, with_kwargs=True)
        before = meter.now()
        out = model.generate(**batch, **gen)
        if args.device == "cuda":
            torch.cuda.synchronize()
        end = time.perf_counter()
        peak = meter.peak()
        handle.remove()
        held = meter.now() - before
    stats = comp.stats[0]
    del out
    return {"policy": args.worker_policy, "budget": args.worker_budget, "mode": args.worker_mode,
            "prompt_len": stats["prompt_len"],
            "image_kv_kept": stats["image_kv_kept"], "claimed": stats["kv_bytes_physical"],
            "full": stats["kv_bytes_full"], "nbytes": stats["cache_bytes_after"], "held": held,
            "decode_peak": peak - marks["after_prefill"], "shrunk_layers": len(stats["shrunk_layers"]),
            "ms_per_token": 1000 * (end - marks["prefill"]) / max(args.new_tokens - 1, 1)}


def run_config(args, policy: str, budget: float, mode: str = "compress") -> dict:
    cmd = [sys.executable, __file__, "--worker-policy", policy, "--worker-budget", str(budget), "--shape",
           args.shape, "--device", args.device, "--side", str(args.side), "--new-tokens", str(args.new_tokens),
           "--max-tokens", str(args.max_tokens), "--threads", str(args.threads), "--worker-mode", mode,
           "--batch", str(args.batch)]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), TOKENIZERS_PARALLELISM="false",
               MALLOC_MMAP_THRESHOLD_="65536")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--shape", default="mid", choices=tuple(SHAPES))
    p.add_argument("--side", type=int, default=896, help="image side in pixels (28 px per image token side)")
    p.add_argument("--budgets", default="1,0.75,0.5,0.25,0.1")
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=16384, help="processor max_pixels / (28*28)")
    p.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    p.add_argument("--modes", default="compress",
                   help="KV modes timed beside no compression, comma-separated: mask, compress, compact "
                        "(default compress; the memory table uses compress)")
    p.add_argument("--batch", type=int, default=1, help="rows per generate call, one image each (default 1)")
    p.add_argument("--worker-mode", default="compress", help=argparse.SUPPRESS)
    p.add_argument("--worker-policy", default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker-budget", type=float, default=1.0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker_policy:
        print(json.dumps(worker(args)))
        return
    budgets = [float(b) for b in args.budgets.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    base = run_config(args, "none", 1.0)
    timed = {(pol, b, mode): run_config(args, pol, b, mode) for b in budgets if b < 1
             for pol in ("retrieval", "uniform") for mode in modes}
    rows = [base] + [r for (_, _, mode), r in timed.items() if mode == "compress"]
    mib = 2 ** 20
    print(f"{args.shape} Qwen2.5-VL on {args.device}, {args.batch} row(s) of a {base['prompt_len']}-token prompt, "
          f"{args.new_tokens} new tokens; MiB, ratios to no compression")
    print(f"{'policy':>9} {'budget':>6} {'img kept':>8} {'layers':>6} {'claimed':>8} {'nbytes':>8} {'held':>8} "
          f"{'ratio c/n/h':>17} {'dec.peak':>8} {'ms/tok':>7}")
    for r in rows:
        ratios = "/".join(f"{r[k] / base[k]:.2f}" if base[k] else "-" for k in ("claimed", "nbytes", "held"))
        print(f"{r['policy']:>9} {r['budget']:>6g} {100 * r['image_kv_kept']:>7.1f}% {r['shrunk_layers']:>6} "
              f"{r['claimed'] / mib:>8.2f} {r['nbytes'] / mib:>8.2f} {r['held'] / mib:>8.2f} {ratios:>17} "
              f"{r['decode_peak'] / mib:>8.2f} {r['ms_per_token']:>7.1f}")
    print(f"\ndecode ms/token ({args.batch} row(s)): no compression {base['ms_per_token']:.1f}")
    print(f"{'policy':>9} {'budget':>6} " + " ".join(f"{m:>9}" for m in modes))
    for b in budgets:
        for pol in ("retrieval", "uniform"):
            if b < 1:
                print(f"{pol:>9} {b:>6g} " + " ".join(f"{timed[pol, b, m]['ms_per_token']:>9.1f}" for m in modes))
    if args.json:
        rows = [base] + list(timed.values())
        args.json.write_text(json.dumps(rows, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
