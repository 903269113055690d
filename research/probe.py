"""Research probe for the demo model: head scores and top-k / random-k / layer-matched ablations on held-out scenes.

The evaluation itself (backend-identical inputs, greedy Acc@0.5, ablation) is the package's
(`research.demo_model.evaluation`, `research.demo_model.model_heads`). Head scores are the attention mass that the
query positions emitting the answer tokens put on the image tokens inside the ground-truth box, averaged over samples.

    python -m research.probe CHECKPOINT [--n 200] [--k 2,4,6] [--draws 5] [--json OUT]
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from research.demo_model.data import FastEncoder
from research.demo_model.evaluation import Prepared, evaluate, held_out_scenes, prepare
from research.demo_model.model_heads import geometry, layer_matched_heads, random_heads, ranking
from research.demo_model.train import load_demo_model
from vrh_lmms.base.boxes.geometry import xywh_to_xyxy
from vrh_lmms.base.heads.geometry import head_name
from vrh_lmms.model.capture.layouts import box_token_indices, image_token_map

# ---------------------------------------------------------------- head scoring

def _token_map(encoder: FastEncoder):
    """Image tokens -> cells of the prompt every sample shares, through discovery's own layout."""
    from vrh_lmms.model.capture.extras import layout_extras

    size = encoder.spec.image_size
    extras = layout_extras("qwen2_5_vl", encoder.processor, {"image_grid_thw": encoder.grid_thw[None]})
    return image_token_map("qwen2_5_vl", encoder.template, (size, size), extras)


@torch.no_grad()
def head_scores(model, tokenizer, encoder: FastEncoder, prep: Prepared) -> np.ndarray:
    """layers x heads: mean over samples of the attention mass from answer-emitting queries onto box tokens."""
    model.set_attn_implementation({"text_config": "eager", "vision_config": "sdpa"})
    try:
        n_layers, n_heads, _ = geometry(model)
        total = np.zeros((n_layers, n_heads))
        count = 0
        tmap = _token_map(encoder)
        for b, batch in enumerate(prep.batches):
            out = model.generate(**batch, do_sample=False, max_new_tokens=12, num_beams=1,
                                 eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                                 temperature=None, top_p=None, top_k=None)
            prompt_len = batch["input_ids"].shape[1]
            # One sequence length per batch: pad finished rows with their eos, which we simply drop below.
            full = dict(batch)
            full["input_ids"] = out
            full["attention_mask"] = torch.ones_like(out)
            full["mm_token_type_ids"] = torch.cat(
                [batch["mm_token_type_ids"], torch.zeros_like(out[:, prompt_len:])], dim=1)
            res = model(**full, output_attentions=True, use_cache=False)
            att = torch.stack(res.attentions, dim=1)  # (B, layers, heads, q, k)
            scenes = prep.scenes[b * len(prep.batches[0]["input_ids"]):][: out.shape[0]]
            for i, scene in enumerate(scenes):
                gen = out[i, prompt_len:].tolist()
                # rows emitting the answer proper (the stop token excluded), as discovery's "out" query set
                n_ans = gen.index(tokenizer.eos_token_id) if tokenizer.eos_token_id in gen else len(gen)
                q = torch.arange(prompt_len - 1, prompt_len - 1 + n_ans)
                keys = tmap.positions[box_token_indices(tmap, xywh_to_xyxy(scene.target_object.bbox))]
                mass = att[i][:, :, q][:, :, :, keys].sum(-1).mean(-1)  # layers x heads
                total += mass.numpy()
                count += 1
        return total / max(count, 1)
    finally:
        model.set_attn_implementation({"text_config": "sdpa", "vision_config": "sdpa"})


def paired_ci(base: np.ndarray, other: np.ndarray, n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Drop in accuracy (points) with a 95% paired bootstrap CI over samples."""
    diff = base.astype(float) - other.astype(float)
    rng = np.random.default_rng(seed)
    boots = diff[rng.integers(0, len(diff), size=(n_boot, len(diff)))].mean(1)
    return 100 * diff.mean(), 100 * float(np.percentile(boots, 2.5)), 100 * float(np.percentile(boots, 97.5))


# ---------------------------------------------------------------- the full probe

def run_probe(model, tokenizer, encoder: FastEncoder, prep: Prepared, ks: Sequence[int], draws: int = 5,
              score_prep: Prepared | None = None, seed: int = 0) -> dict:
    """Baseline, scores (on `score_prep`, default the eval scenes), then top-k / random-k / layer-matched-k."""
    t0 = time.time()
    n_layers, n_heads, _ = geometry(model)
    base = evaluate(model, tokenizer, prep)
    t_base = time.time() - t0
    scores = head_scores(model, tokenizer, encoder, score_prep or prep)
    order = ranking(scores)
    rng = np.random.default_rng(seed)
    rows = []
    for k in ks:
        top = order[:k]
        r_top = evaluate(model, tokenizer, prep, top)
        row = {"k": k, "top_heads": [head_name(l, h) for l, h in top], "top_acc": r_top.acc50,
               "top_parse_fail": r_top.parse_rate, "top_drop_ci": paired_ci(base.correct, r_top.correct)}
        rand, rand_ex, lm = [], [], []
        for _ in range(draws):
            rand.append(evaluate(model, tokenizer, prep, random_heads(n_layers, n_heads, k, rng)))
            rand_ex.append(evaluate(model, tokenizer, prep, random_heads(n_layers, n_heads, k, rng, exclude=top)))
            lm.append(evaluate(model, tokenizer, prep, layer_matched_heads(top, n_heads, rng)))
        for name, rs in (("random", rand), ("random_excl", rand_ex), ("layer_matched", lm)):
            row[f"{name}_acc"] = float(np.mean([r.acc50 for r in rs]))
            row[f"{name}_acc_each"] = [r.acc50 for r in rs]
            row[f"{name}_parse_fail"] = float(np.mean([r.parse_rate for r in rs]))
        rows.append(row)
    return {"n": len(prep.scenes), "baseline_acc": base.acc50, "baseline_parse_fail": base.parse_rate,
            "baseline_iou": float(base.ious.mean()), "scores": scores.round(5).tolist(),
            "ranking": [head_name(l, h) for l, h in order], "rows": rows, "seconds": time.time() - t0,
            "seconds_baseline": t_base, "geometry": {"layers": n_layers, "heads": n_heads}}


def summarise(result: dict) -> str:
    lines = [f"baseline Acc@0.5 {100 * result['baseline_acc']:.1f}% "
             f"(parse fail {100 * result['baseline_parse_fail']:.1f}%, "
             f"mIoU {result['baseline_iou']:.3f}, n={result['n']})"]
    b = result["baseline_acc"]
    for r in result["rows"]:
        d, lo, hi = r["top_drop_ci"]
        lines.append(
            f"k={r['k']:>2}: top {100 * r['top_acc']:5.1f} (drop {d:5.1f} [{lo:5.1f},{hi:5.1f}], "
            f"parse {100 * r['top_parse_fail']:.1f}%)"
            f" | random {100 * (b - r['random_acc']):5.1f} | random-excl {100 * (b - r['random_excl_acc']):5.1f}"
            f" | layer-matched {100 * (b - r['layer_matched_acc']):5.1f}  drops; top={','.join(r['top_heads'])}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--score-n", type=int, default=0, help="score heads on other held-out scenes (0: the eval set)")
    ap.add_argument("--k", default="2,4,6")
    ap.add_argument("--draws", type=int, default=5)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    model, processor, spec = load_demo_model(args.checkpoint, dtype=getattr(torch, args.dtype))
    scenes = held_out_scenes(spec, args.n)
    encoder = FastEncoder(processor, spec, scenes[0])
    prep = prepare(encoder, scenes)
    score_prep = prepare(encoder, held_out_scenes(spec, args.score_n, start=100_000)) if args.score_n else None
    if args.dtype != "float32":
        for batch in prep.batches:
            batch["pixel_values"] = batch["pixel_values"].to(getattr(torch, args.dtype))
    res = run_probe(model, processor.tokenizer, encoder, prep, [int(k) for k in args.k.split(",")],
                    draws=args.draws, score_prep=score_prep)
    print(summarise(res))
    print(f"probe seconds {res['seconds']:.1f} (baseline pass {res['seconds_baseline']:.1f})")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
