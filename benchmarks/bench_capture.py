"""Cost of attention capture: time and peak memory of one forward, side by side with a plain sdpa forward and with
eager `output_attentions=True`, at growing image-token counts.

    python benchmarks/bench_capture.py                         # tiny Qwen2.5-VL on CPU
    python benchmarks/bench_capture.py --device cuda --shape 7b  # Qwen2.5-VL-7B shape, random bf16 weights, on GPU

Memory is the peak *extra* memory of the forward over what is resident just before it (weights, inputs):
- CPU: each (mode, size) runs in a fresh subprocess that builds the model, runs one warm-up forward, resets the
  kernel's peak-RSS counter (`/proc/self/clear_refs` = 5), runs the measured forward and reads VmHWM - VmRSS. RSS
  sees every allocation torch makes (tracemalloc does not), and a fresh process keeps modes from sharing allocator
  caches.
- CUDA: `torch.cuda.max_memory_allocated()` after `reset_peak_memory_stats()`, minus the allocated memory before.
Time is the median wall time of `--reps` forwards after one warm-up (CUDA synchronised).
Query rows: the last `--rows` positions (where an answer would be); key sets: the image tokens inside a central box
(through the layout) and all image tokens. Mode `grid` adds what discovery's `localization_heads` cell captures:
one single-token key set per image token of the main view's grid (vrh_lmms.runs.discovery.collector.grid_key_sets).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

MODES = ("plain", "capture", "grid", "eager")
SHAPE_7B = {
    "text": {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
             "num_key_value_heads": 4, "head_dim": 128},
    "vision": {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
               "fullatt_block_indexes": [7, 15, 23, 31]},
    "vocab_size": 152064,
}


def build(shape: str, device: str, max_tokens: int):
    """Random-weight Qwen2.5-VL of the requested shape and a processor admitting `max_tokens` image tokens."""
    return build_from_spec(SHAPE_7B if shape == "7b" else {}, device, max_tokens)


def build_from_spec(spec: dict, device: str, max_tokens: int):
    """Random-weight Qwen2.5-VL from a shape spec ({"text": ..., "vision": ..., "vocab_size": ...}; {} is the tiny
    default), seeded, sdpa attention, bf16 on CUDA; and a processor admitting `max_tokens` image tokens."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    from vrh_lmms.model.tiny.qwen2_5_vl import make_config, make_processor, make_tokenizer

    tokenizer = make_tokenizer()
    processor = make_processor(tokenizer, max_pixels=28 * 28 * max_tokens)
    config = make_config(tokenizer, spec.get("text"), spec.get("vision"))
    if "vocab_size" in spec:
        config.text_config.vocab_size = spec["vocab_size"]
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration._from_config(config, attn_implementation="sdpa", dtype=dtype)
    return model.eval(), processor


def make_inputs(processor, side: int, device: str):
    from PIL import Image

    from vrh_lmms.model.tiny.inputs import render_prompt, scene_messages

    image = Image.new("RGB", (side, side), (90, 90, 90))
    prompt = render_prompt(processor, scene_messages("the red circle", image))
    prompt += '[{"bbox_2d": [10, 20, 30, 40], "label": "the red circle"}]'  # teacher-forced answer rows
    batch = processor(text=[prompt], images=[image], return_tensors="pt")
    return {k: v.to(device) for k, v in batch.items()}


def make_plans(model, processor, batch, rows: int, side: int) -> dict:
    """The capture plan of mode `capture`, and of mode `grid` (the same plus one key set per grid token)."""
    from vrh_lmms.model.capture import CapturePlan
    from vrh_lmms.model.capture.extras import layout_extras
    from vrh_lmms.model.capture.layouts import box_key_mask, image_token_map, main_view_grid
    from vrh_lmms.runs.discovery.collector import grid_key_sets

    ids = batch["input_ids"].cpu()
    t = ids.shape[1]
    tmap = image_token_map("qwen2_5_vl", ids[0], (side, side), layout_extras("qwen2_5_vl", processor, batch, 0))
    box = box_key_mask(tmap, [side * 0.3, side * 0.3, side * 0.7, side * 0.7], t)
    device = batch["input_ids"].device
    sets = {"box": box[None].to(device), "image": tmap.key_mask(t)[None].to(device)}
    grid = {k: v.to(device) for k, v in grid_key_sets(tmap.positions, main_view_grid(tmap), t).items()}
    query = torch.arange(t - rows, t)[None].to(device)
    return {"capture": CapturePlan(query_positions=query, key_sets=sets),
            "grid": CapturePlan(query_positions=query, key_sets=sets | grid)}


def forward(mode: str, model, batch, plans: dict):
    from vrh_lmms.model.capture import capture_attention

    with torch.no_grad():
        if mode == "plain":
            return model(**batch, use_cache=False).logits
        if mode in plans:
            with capture_attention(model, plans[mode]) as handle:
                model(**batch, use_cache=False)
            return handle.result()
        model.set_attn_implementation({"text_config": "eager"})
        try:
            return model(**batch, use_cache=False, output_attentions=True).attentions
        finally:
            model.set_attn_implementation({"text_config": "sdpa"})


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_modes(model, batch, plan, reps: int, device: str) -> dict[str, float]:
    """Median ms per mode; modes interleaved round-robin so background load hits them alike."""
    times: dict[str, list[float]] = {m: [] for m in MODES}
    for mode in MODES:
        forward(mode, model, batch, plan)
    for _ in range(reps):
        for mode in MODES:
            _sync(device)
            start = time.perf_counter()
            out = forward(mode, model, batch, plan)
            _sync(device)
            times[mode].append(time.perf_counter() - start)
            del out
    return {m: statistics.median(v) * 1000 for m, v in times.items()}


def _rss_kb() -> tuple[int, int]:
    with open("/proc/self/status") as f:
        status = f.read()
    return (int(re.search(r"VmHWM:\s+(\d+)", status).group(1)), int(re.search(r"VmRSS:\s+(\d+)", status).group(1)))


def memory_mode(mode, model, batch, plan, device: str) -> float:
    """Peak extra MiB of one forward over the memory resident before it."""
    forward(mode, model, batch, plan)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = forward(mode, model, batch, plan)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
        del out
        return peak / 2**20
    import ctypes

    ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand the warm-up's freed heap back, so the peak below is this forward's
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    _, rss = _rss_kb()
    out = forward(mode, model, batch, plan)
    hwm, _ = _rss_kb()
    del out
    return (hwm - rss) / 1024


def worker(args) -> None:
    """One (mode, size) memory measurement in a fresh process (CPU)."""
    torch.set_num_threads(args.threads)
    model, processor = build(args.shape, args.device, args.max_tokens)
    batch = make_inputs(processor, args.worker_size, args.device)
    plan = make_plans(model, processor, batch, args.rows, args.worker_size)
    print(json.dumps({"mib": memory_mode(args.worker_mode, model, batch, plan, args.device)}))


def cpu_memory(args, mode: str, side: int) -> float:
    cmd = [sys.executable, __file__, "--worker-mode", mode, "--worker-size", str(side), "--shape", args.shape,
           "--device", args.device, "--rows", str(args.rows), "--max-tokens", str(args.max_tokens),
           "--threads", str(args.threads)]
    # A fixed mmap threshold makes every large tensor its own mapping, returned to the OS when freed: RSS then
    # follows live memory instead of glibc's cached arenas.
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), TOKENIZERS_PARALLELISM="false",
               MALLOC_MMAP_THRESHOLD_="65536")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])["mib"]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--shape", default="tiny", choices=("tiny", "7b"))
    p.add_argument("--sizes", default=None, help="image sides in pixels, comma-separated (28 px per token side)")
    p.add_argument("--rows", type=int, default=20)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=4096, help="processor max_pixels / (28*28)")
    p.add_argument("--json", type=Path, default=None, help="also write the table as JSON")
    p.add_argument("--worker-mode", choices=MODES, help=argparse.SUPPRESS)
    p.add_argument("--worker-size", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker_mode:
        return worker(args)
    torch.set_num_threads(args.threads)
    default_sizes = "448,644,896,1288" if args.shape == "7b" else "224,448,672,896,1120"
    sizes = [int(s) for s in (args.sizes or default_sizes).split(",")]
    model, processor = build(args.shape, args.device, args.max_tokens)
    print(f"# Qwen2.5-VL {args.shape} shape, random weights, {args.device}, {args.rows} query rows, "
          f"{locate_layers(model)} text layers; time = median of {args.reps}; memory = peak extra MiB of one forward")
    header = (f"{'side':>5} {'img':>5} {'T':>5} | {'plain ms':>9} {'capture':>9} {'x':>5} {'grid':>9} {'x':>5} "
              f"{'eager':>9} {'x':>5} | {'plain MiB':>9} {'capture':>9} {'x':>5} {'grid':>9} {'x':>5} {'eager':>9} "
              f"{'x':>5}")
    print(header)
    rows = []
    for side in sizes:
        batch = make_inputs(processor, side, args.device)
        plan = make_plans(model, processor, batch, args.rows, side)
        n_img = int(plan["capture"].key_sets["image"].sum())
        t = batch["input_ids"].shape[1]
        ms = time_modes(model, batch, plan, args.reps, args.device)
        if args.device == "cuda":
            mib = {m: memory_mode(m, model, batch, plan, args.device) for m in MODES}
        else:
            mib = {m: cpu_memory(args, m, side) for m in MODES}
        row = {"side": side, "image_tokens": n_img, "T": t, "ms": ms, "mib": mib}
        rows.append(row)
        r = {m: mib[m] / max(mib["plain"], 1e-9) for m in MODES}
        print(f"{side:>5} {n_img:>5} {t:>5} | {ms['plain']:>9.1f} {ms['capture']:>9.1f} "
              f"{ms['capture'] / ms['plain']:>5.2f} {ms['grid']:>9.1f} {ms['grid'] / ms['plain']:>5.2f} "
              f"{ms['eager']:>9.1f} {ms['eager'] / ms['plain']:>5.2f} | "
              f"{mib['plain']:>9.1f} {mib['capture']:>9.1f} {r['capture']:>5.2f} {mib['grid']:>9.1f} {r['grid']:>5.2f} "
              f"{mib['eager']:>9.1f} {r['eager']:>5.2f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=1))


def locate_layers(model) -> int:
    from vrh_lmms.model.backbone import locate_decoder

    return locate_decoder(model).geometry.layers


if __name__ == "__main__":
    main()
