"""Research probe for the demo model: greedy Acc@0.5, parse failures, head scores and head ablations.

Inputs mirror the lmms-eval `qwen2_5_vl` backend (see `vrh_lmms.demo.data`); decoding is greedy, as the backend's
default. Ablation zeroes a head's slice of each text layer's `o_proj` input with a forward pre-hook, the same
operation as zeroing those `o_proj` weight columns. Head scores are the attention mass that the query positions
emitting the answer tokens put on the image tokens inside the ground-truth box, averaged over samples.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from vrh_lmms.boxes.geometry import iou, xywh_to_xyxy
from vrh_lmms.capture.layouts import box_token_indices, image_token_map
from vrh_lmms.demo.data import FastEncoder, decoded_image
from vrh_lmms.demo.spec import EVAL_SCENE_SEED, DemoSpec
from vrh_lmms.heads.geometry import head_name
from vrh_lmms.synth.scenes import Scene, generate_scene

Head = tuple[int, int]
_NUM = r"\s*(-?\d+(?:\.\d+)?)\s*"
_BOX = re.compile(r"\[" + ",".join([_NUM] * 4) + r"\]")


def parse_box(text: str) -> list[float] | None:
    """First bracketed list of four numbers (`[x1, y1, x2, y2]`, tokens may be space separated)."""
    m = _BOX.search(text)
    return [float(v) for v in m.groups()] if m else None


# ---------------------------------------------------------------- geometry and ablation

def text_layers(model) -> list:
    return list(model.model.language_model.layers)


def chosen_layers(model, layers: tuple, option: str) -> list[tuple[int, object]]:
    """(index, layer) for the text layers a design option names (empty: all); an index the model lacks is refused,
    naming the option."""
    all_layers = text_layers(model)
    bad = [i for i in layers if not 0 <= i < len(all_layers)]
    if bad:
        raise ValueError(f"{option} {bad} out of range: the model has {len(all_layers)} text layers")
    return [(i, layer) for i, layer in enumerate(all_layers) if not layers or i in layers]


def geometry(model) -> tuple[int, int, int]:
    """(layers, heads, head_dim) of the language decoder; heads = o_proj.in_features // head_dim."""
    layers = text_layers(model)
    attn = layers[0].self_attn
    return len(layers), attn.o_proj.in_features // attn.head_dim, attn.head_dim


@contextlib.contextmanager
def ablate(model, heads: Iterable[Head]) -> Iterator[None]:
    """Zero the listed heads' outputs before `o_proj` (every position, every sample)."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    handles = []
    layers = text_layers(model)
    for layer, hs in by_layer.items():
        hd = layers[layer].self_attn.head_dim
        mask = torch.ones(layers[layer].self_attn.o_proj.in_features)
        for h in hs:
            mask[h * hd:(h + 1) * hd] = 0.0

        def hook(module, args, mask=mask):
            return (args[0] * mask.to(args[0].dtype),) + tuple(args[1:])

        handles.append(layers[layer].self_attn.o_proj.register_forward_pre_hook(hook))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


# ---------------------------------------------------------------- data

def held_out_scenes(spec: DemoSpec, n: int, start: int = 0) -> list[Scene]:
    cfg = spec.scene_config()
    return [generate_scene(start + i, EVAL_SCENE_SEED, cfg) for i in range(n)]


@dataclass
class Prepared:
    """Held-out scenes with their backend-identical inputs, built once and reused by every configuration."""

    scenes: list[Scene]
    batches: list[dict[str, torch.Tensor]]


def prepare(encoder: FastEncoder, scenes: Sequence[Scene], batch_size: int = 64) -> Prepared:
    batches = []
    for i in range(0, len(scenes), batch_size):
        chunk = scenes[i:i + batch_size]
        images = np.stack([decoded_image(s, encoder.spec) for s in chunk])
        batches.append(encoder.batch(chunk, images))
    return Prepared(list(scenes), batches)


# ---------------------------------------------------------------- decoding and metrics

@torch.no_grad()
def greedy(model, tokenizer, batch: dict[str, torch.Tensor], max_new_tokens: int = 12) -> list[str]:
    out = model.generate(**batch, do_sample=False, max_new_tokens=max_new_tokens, num_beams=1,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         temperature=None, top_p=None, top_k=None)
    new = out[:, batch["input_ids"].shape[1]:]
    return tokenizer.batch_decode(new, skip_special_tokens=True, clean_up_tokenization_spaces=False)


@dataclass
class EvalResult:
    correct: np.ndarray  # bool per sample
    parse_fail: np.ndarray  # bool per sample
    ious: np.ndarray
    texts: list[str]
    on_object: np.ndarray  # bool per sample: IoU >= 0.5 with *some* object of the scene (referent or distractor)

    @property
    def acc50(self) -> float:
        return float(self.correct.mean())

    @property
    def localised(self) -> float:
        """Share of answers that land on an object at all: localising without selecting the referent shows as
        `localised` well above `acc50` (a model picking objects blindly gets acc50 = localised / objects)."""
        return float(self.on_object.mean())

    @property
    def parse_rate(self) -> float:
        return float(self.parse_fail.mean())


def evaluate(model, tokenizer, prep: Prepared, heads: Iterable[Head] = ()) -> EvalResult:
    texts: list[str] = []
    with ablate(model, list(heads)):
        for batch in prep.batches:
            texts.extend(greedy(model, tokenizer, batch))
    return score_answers(texts, prep.scenes)


def score_answers(texts: Sequence[str], scenes: Sequence[Scene]) -> EvalResult:
    """Acc@0.5 against each scene's referent, parse failures, and whether the box lands on any object."""
    ious, fails, on_object = [], [], []
    for text, scene in zip(texts, scenes, strict=True):
        box = parse_box(text)
        fails.append(box is None)
        ious.append(0.0 if box is None else iou(box, xywh_to_xyxy(scene.target_object.bbox)))
        on_object.append(box is not None and any(iou(box, xywh_to_xyxy(o.bbox)) >= 0.5 for o in scene.objects))
    ious_a = np.array(ious)
    return EvalResult(ious_a >= 0.5, np.array(fails), ious_a, list(texts), np.array(on_object))


# ---------------------------------------------------------------- head scoring

def _token_map(encoder: FastEncoder):
    """Image tokens -> cells of the prompt every sample shares, through discovery's own layout."""
    from vrh_lmms.capture.extras import layout_extras

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


def ranking(scores: np.ndarray) -> list[Head]:
    """Every head, best first (ties by layer, then head)."""
    n_layers, n_heads = scores.shape
    heads = [(l, h) for l in range(n_layers) for h in range(n_heads)]
    return sorted(heads, key=lambda lh: (-scores[lh], lh[0], lh[1]))


def random_heads(n_layers: int, n_heads: int, k: int, rng: np.random.Generator,
                 exclude: Sequence[Head] = ()) -> list[Head]:
    pool = [(l, h) for l in range(n_layers) for h in range(n_heads) if (l, h) not in set(exclude)]
    idx = rng.choice(len(pool), size=k, replace=False)
    return [pool[i] for i in idx]


def layer_matched_heads(top: Sequence[Head], n_heads: int, rng: np.random.Generator) -> list[Head]:
    """Same number of heads per layer as `top`, drawn from that layer's other heads."""
    out: list[Head] = []
    per_layer: dict[int, int] = {}
    for l, _ in top:
        per_layer[l] = per_layer.get(l, 0) + 1
    taken = set(top)
    for l, c in sorted(per_layer.items()):
        pool = [h for h in range(n_heads) if (l, h) not in taken]
        if len(pool) < c:
            raise ValueError(f"layer {l} has only {len(pool)} heads outside the top set; need {c}")
        out.extend((l, int(h)) for h in rng.choice(pool, size=c, replace=False))
    return out


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

    from vrh_lmms.demo.train import load_demo_model

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
