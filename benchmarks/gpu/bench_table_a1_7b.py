"""The figures behind one paper-table row on one GPU: Table A1's RefCOCO row for a 7B VLM is 11 head configurations
x 8,611 expressions = 94,721 greedy generations. On random bf16 Qwen2.5-VL-7B-shape weights at 640x480 (the size of
a COCO image), each part printed as one line and written to --json as soon as it is measured:

- generations/s of packed generate for 11 configurations (baseline + 10 random head sets of 20 heads, one in four
  mean-ablated), 1 doc per call (today's `--batch-size 1 --pack auto`) and `--batch-docs` docs per call, for each
  decode mode (vrh_lmms.model.decoding: static = static cache + transformers' CUDA-graph compile, dynamic =
  DynamicCache),
  and the extrapolated time of the 94,721 generations at each;
- decode ms/step at 1 / 64 / 704 rows (row r ablates configuration r mod 11), static vs dynamic: (t(N new tokens) -
  t(1 new token)) / (N - 1), so prefill and the one-off compile drop out (every shape is warmed first);
- prefill: one forward of the language model over `--prefill-rows` prompts, its FLOP counted from the shapes, TFLOP/s
  and the share of the 989 TFLOP/s dense bf16 peak;
- the vision tower per image (median over a batch of 16 images);
- the host's CPU time per doc: prompt rendering, image processing and the inputs' fingerprint (what every doc costs
  the host before the model sees it), measured with process_time.

    python benchmarks/gpu/bench_table_a1_7b.py --json out.json     # on the GPU (benchmarks/gpu/bench_table_a1_7b.sh)
    python benchmarks/gpu/bench_table_a1_7b.py --tiny               # seconds, on CPU: every code path at tiny shape
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pack_7b import build, head_sets, sync  # noqa: E402

TABLE_A1_GENERATIONS = 94_721  # 11 configurations x 8,611 RefCOCO expressions
PEAK_TFLOPS = 989.0  # dense bf16, H100/H200 SXM datasheet
CONFIGS = 11


class Report:
    """Lines printed as they come, every figure kept for --json (written after each part, so a killed run keeps
    what it measured)."""

    def __init__(self, path: Path | None) -> None:
        self.path, self.data = path, {"parts": {}}

    def add(self, part: str, line: str, **figures) -> None:
        print(line, flush=True)
        self.data["parts"].setdefault(part, []).append(dict(figures, line=line))
        if self.path:
            self.path.write_text(json.dumps(self.data, indent=1))


def timed(device: str, fn) -> tuple[object, float]:
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - start


def gen_kwargs(model, mode: str, new_tokens: int) -> dict:
    """Greedy, exactly `new_tokens` tokens (random weights never stop on their own), with `mode`'s cache."""
    from vrh_lmms.model.decoding import Decoding

    base = {"do_sample": False, "num_beams": 1, "max_new_tokens": new_tokens, "min_new_tokens": new_tokens}
    return Decoding(model, mode).kwargs(base)


def stack(batches: list[dict]) -> dict:
    """One left-padded batch of several single-prompt requests of equal length (same image size and prompt shape)."""
    out = {}
    for key in batches[0]:
        parts = [b[key] for b in batches]
        out[key] = torch.cat(parts, 0)
    return out


def docs(processor, n: int, size, device: str) -> list[dict]:
    """n requests of the same token length (their prompts differ only in the scene's pixels and its expression is
    fixed), so they batch without padding."""
    from vrh_lmms.base.synth.scenes import SceneConfig, generate_scene
    from vrh_lmms.model.tiny.inputs import render_prompt, scene_messages

    out = []
    for seed in range(n):
        image = generate_scene(seed, 0, SceneConfig(image_size=max(size))).image.resize(size)
        prompt = render_prompt(processor, scene_messages("the small red circle on the left", image))
        out.append({k: v.to(device) for k, v in processor(text=[prompt], images=[image], return_tensors="pt").items()})
    return out


def throughput(model, decoder, reqs, configs, means, mode, new_tokens, per_call, device) -> tuple[float, str]:
    """Seconds per generation of packed generate over `reqs`, `per_call` docs per generate call, and the cache it
    really decoded with (a static run the family refuses falls back to dynamic)."""
    from vrh_lmms.model.packing import PackedGenerate

    pack = PackedGenerate(model, decoder, configs, means=means, decode=mode)
    kwargs = gen_kwargs(model, "dynamic", new_tokens)  # the pack adds its own cache
    calls = [stack(reqs[i:i + per_call]) for i in range(0, len(reqs), per_call)]

    def run():
        with pack:
            for batch in calls:
                for j in range(len(configs)):
                    pack.serve(j)
                    model.generate(**batch, **kwargs)

    _, seconds = timed(device, run)
    return seconds / (len(reqs) * len(configs)), pack.decoding.cache


def decode_step_ms(model, decoder, req, configs, means, rows, mode, new_tokens, device) -> float:
    """ms per decode step at `rows` rows (row r ablates configuration r mod len(configs))."""
    from vrh_lmms.model.ablation import RowAblator

    batch = stack([req] * rows)
    with RowAblator(decoder, configs, means=means) as ablator:
        ablator.set_rows([r % len(configs) for r in range(rows)])
        _, t1 = timed(device, lambda: model.generate(**batch, **gen_kwargs(model, mode, 1)))
        _, tn = timed(device, lambda: model.generate(**batch, **gen_kwargs(model, mode, new_tokens)))
    return 1000 * (tn - t1) / (new_tokens - 1)


def lm_flop(geometry, text_config, rows: int, seq: int) -> float:
    """Forward FLOP of the language model: 2 x weights x tokens for the projections and MLP, plus causal attention
    (QK^T and AV: 2 x 2 x heads x head_dim x seq^2 / 2 per layer and row); the LM head on the last token only."""
    h, inter = text_config.hidden_size, text_config.intermediate_size
    qkv = h * (geometry.heads + 2 * geometry.kv_heads) * geometry.head_dim
    per_layer = qkv + geometry.heads * geometry.head_dim * h + 3 * h * inter
    dense = 2 * per_layer * geometry.layers * rows * seq
    attention = 2 * geometry.heads * geometry.head_dim * seq * seq * geometry.layers * rows
    return float(dense + attention + 2 * h * text_config.vocab_size * rows)


def prefill(model, req, rows: int, device: str, reps: int, vision_s: float) -> tuple[float, int]:
    """Median seconds of the language model's share of one prefill forward over `rows` prompts (the whole forward
    minus the vision tower's `vision_s` per image, timed on its own), and the sequence length."""
    batch = stack([req] * rows)
    with torch.no_grad():
        run = lambda: model(**batch, use_cache=False, logits_to_keep=1)  # noqa: E731
        run()
        times = [timed(device, run)[1] for _ in range(reps)]
    return statistics.median(times) - rows * vision_s, batch["input_ids"].shape[1]


def vision_per_image(model, reqs, device: str, reps: int) -> float:
    batch = stack(reqs)
    with torch.no_grad():
        run = lambda: model.model.get_image_features(batch["pixel_values"], batch["image_grid_thw"])  # noqa: E731
        run()
        times = [timed(device, run)[1] for _ in range(reps)]
    return statistics.median(times) / len(reqs)


def host_per_doc(processor, size, n: int) -> float:
    """CPU seconds per doc of what the host does before the model: render the prompt, process the image (resize,
    patchify, normalize) and fingerprint the inputs (packing's replay key)."""
    from vrh_lmms.base.synth.scenes import SceneConfig, generate_scene
    from vrh_lmms.model.packing import fingerprint
    from vrh_lmms.model.tiny.inputs import render_prompt, scene_messages

    images = [generate_scene(seed, 0, SceneConfig(image_size=max(size))).image.resize(size) for seed in range(n)]
    start = time.process_time()
    for image in images:
        prompt = render_prompt(processor, scene_messages("the small red circle on the left", image))
        batch = processor(text=[prompt], images=[image], return_tensors="pt")
        fingerprint((), dict(batch))
    return (time.process_time() - start) / n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="tiny random model on CPU, small counts: checks every code "
                                                       "path in seconds (the figures mean nothing)")
    p.add_argument("--size", default="640x480", help="image size WxH (default 640x480, a COCO image)")
    p.add_argument("--docs", type=int, default=8, help="docs timed per throughput figure (default 8)")
    p.add_argument("--batch-docs", type=int, default=64, help="docs per call for the batched throughput (default 64)")
    p.add_argument("--rows", default="1,64,704", help="decode rows (default 1,64,704)")
    p.add_argument("--modes", default="dynamic,static", help="decode modes to compare (default dynamic,static)")
    p.add_argument("--new-tokens", type=int, default=16, help="tokens per answer (default 16)")
    p.add_argument("--prefill-rows", type=int, default=16, help="prompts in the timed prefill (default 16)")
    p.add_argument("--parts", default="throughput,decode,prefill,vision,host")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    device = "cpu" if args.tiny else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device (use --tiny for the CPU dry run)", file=sys.stderr)
        return 2
    if args.tiny:
        args.docs, args.batch_docs, args.rows, args.new_tokens, args.prefill_rows = 2, 2, "1,4", 4, 2
        args.size = "224x168"
    size = tuple(int(v) for v in args.size.split("x"))
    rows = [int(r) for r in args.rows.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    parts = set(args.parts.split(","))
    torch.backends.cuda.matmul.allow_tf32 = False
    dtype = torch.float32 if args.tiny else torch.bfloat16
    from vrh_lmms.model.backbone import locate_decoder

    report = Report(args.json)
    (model, processor), t_build = timed(device, lambda: build("tiny" if args.tiny else "7b", device, dtype, None,
                                                              size[0] * size[1] // (28 * 28) + 64))
    decoder = locate_decoder(model)
    g = decoder.geometry
    configs = head_sets(g, CONFIGS, 20, 0)
    means = 0.02 * torch.randn(g.layers, g.heads, g.head_dim, generator=torch.Generator().manual_seed(1))
    reqs = docs(processor, max(args.docs, args.batch_docs, 16 if not args.tiny else 2), size, device)
    prompt = reqs[0]["input_ids"].shape[1]
    report.add("setup", f"{torch.cuda.get_device_name() if device == 'cuda' else 'CPU'}; torch {torch.__version__}; "
               f"{'tiny' if args.tiny else '7b'} shape, {g.layers} layers x {g.heads} heads (kv {g.kv_heads}); "
               f"{dtype}; {size[0]}x{size[1]} image, {prompt}-token prompt, {args.new_tokens} new tokens; "
               f"{CONFIGS} configurations; built in {t_build:.1f} s", prompt=prompt, build_s=t_build)
    with torch.no_grad():
        if "throughput" in parts:
            for mode in modes:
                for per_call in (1, args.batch_docs):
                    n = max(per_call, args.docs if per_call == 1 else per_call)
                    throughput(model, decoder, reqs[:per_call], configs, means, mode, args.new_tokens, per_call,
                               device)  # warm this shape (and compile it, for static on CUDA)
                    s, ran = throughput(model, decoder, reqs[:n], configs, means, mode, args.new_tokens, per_call,
                                        device)
                    total = s * TABLE_A1_GENERATIONS
                    report.add("throughput", f"throughput {mode:>7}, {per_call:>3} doc(s) x {CONFIGS} configurations "
                               f"per call: {1 / s:8.1f} generations/s; Table A1 RefCOCO row ({TABLE_A1_GENERATIONS:,}"
                               f" generations): {total / 60:6.1f} min" + ("" if ran == mode else f" (ran as {ran})"),
                               mode=mode, ran=ran, docs_per_call=per_call, gen_per_s=1 / s, table_a1_min=total / 60)
        if "decode" in parts:
            for r in rows:
                for mode in modes:
                    try:
                        decode_step_ms(model, decoder, reqs[0], configs, means, r, mode, args.new_tokens, device)
                        ms = decode_step_ms(model, decoder, reqs[0], configs, means, r, mode, args.new_tokens, device)
                    except (RuntimeError, ValueError, TypeError) as exc:  # said, and the other shapes still run
                        report.add("decode", f"decode {mode:>7} at {r:>4} rows: FAILED {type(exc).__name__}: "
                                   f"{str(exc).splitlines()[0][:300]}", mode=mode, rows=r, error=str(exc)[:2000])
                        continue
                    report.add("decode", f"decode {mode:>7} at {r:>4} rows: {ms:8.2f} ms/step", mode=mode, rows=r,
                               ms_per_step=ms)
        vision_s = vision_per_image(model, reqs[:16], device, 3)
        if "vision" in parts:
            report.add("vision", f"vision tower: {1000 * vision_s:.2f} ms per image", ms_per_image=1000 * vision_s)
        if "prefill" in parts:
            seconds, seq = prefill(model, reqs[0], args.prefill_rows, device, 3, vision_s)
            flop = lm_flop(g, model.config.text_config, args.prefill_rows, seq)
            tflops = flop / seconds / 1e12
            report.add("prefill", f"prefill {args.prefill_rows} x {seq} tokens: {1000 * seconds:.1f} ms, "
                       f"{tflops:.0f} TFLOP/s = {100 * tflops / PEAK_TFLOPS:.1f}% of {PEAK_TFLOPS:.0f}",
                       rows=args.prefill_rows, seq=seq, ms=1000 * seconds, tflops=tflops,
                       share_of_peak=tflops / PEAK_TFLOPS)
    if "host" in parts:
        cpu = host_per_doc(processor, size, 4 if args.tiny else 32)
        report.add("host", f"host CPU per doc (prompt, image processing, fingerprint): {1000 * cpu:.1f} ms",
                   ms_per_doc=1000 * cpu)
    print("DONE")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
