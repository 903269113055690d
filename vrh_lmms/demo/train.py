"""Train the demo's tiny grounding VLM (a real `Qwen2_5_VLForConditionalGeneration`) on synthetic scenes.

Inputs are built exactly as lmms-eval's `qwen2_5_vl` backend builds them (`vrh_lmms.demo.data`), so the model is
trained on what evaluation feeds it. All images share one size, so batches need no padding. The loss covers only
the answer tokens (`[ x1 , y1 , x2 , y2 ] <|im_end|>`); coordinate tokens may get Gaussian soft targets over
neighbouring coordinate values, which teaches their order much faster than one-hot targets. Optional head dropout
("DropHead": zero each head's `o_proj` input slice with probability p, no rescaling, the same operation as the
ablation) makes the model robust to losing random heads; an optional group lasso on whole heads (q, k, v rows and
o_proj columns) pushes unused heads to zero. Everything is a function of the seed: init, scene stream, head-drop masks.
"""

from __future__ import annotations

import json
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vrh_lmms.demo.data import FastEncoder, answer_token_ids, decoded_image
from vrh_lmms.demo.spec import TRAIN_SCENE_SEED, DemoSpec
from vrh_lmms.synth.scenes import Scene, generate_scene
from vrh_lmms.tiny import qwen2_5_vl as tiny
from vrh_lmms.tiny.common import save_checkpoint, seeded

DESIGN_FILE = "train_design.json"


@dataclass(frozen=True)
class Design:
    """Model geometry, data spec and training recipe of one experiment."""

    name: str
    spec: DemoSpec = field(default_factory=DemoSpec)
    text: dict[str, Any] = field(default_factory=dict)
    vision: dict[str, Any] = field(default_factory=dict)
    init_range: float = 0.08
    rope_theta: float = 10000.0  # Qwen2.5-VL checkpoints use 1e6
    mrope_section: tuple = ()  # default: the factory's split of head_dim / 2 into (t, h, w)
    steps: int = 6000
    batch_size: int = 32
    lr: float = 1e-3
    warmup: int = 300
    min_lr_frac: float = 0.05
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    coord_sigma: float = 4.0  # px; 0 gives one-hot targets
    head_drop: float = 0.0
    head_drop_layers: tuple = ()  # text layers that get head dropout (empty: all)
    group_lasso: float = 0.0
    lasso_from: int = 0  # step at which the group lasso starts (after the task is learnt, it only prunes)
    lasso_ramp: int = 1
    eval_every: int = 500
    eval_n: int = 256
    # [[until_step, {SceneConfig overrides}], ...]: easier scenes first (e.g. fewer objects); the spec's own
    # scene config applies from the last until_step on and is what evaluation uses.
    curriculum: tuple = ()
    refs_per_image: int = 1  # sequences per training image, each naming another uniquely described object

    def scene_spec(self, step: int) -> DemoSpec:
        for until, overrides in self.curriculum:
            if step < until:
                return replace(self.spec, scene={**self.spec.scene, **overrides})
        return self.spec

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Design":
        data = dict(data)
        data["spec"] = DemoSpec.from_dict(data.get("spec", {}))
        data["curriculum"] = tuple((int(u), dict(o)) for u, o in data.get("curriculum", ()))
        data["mrope_section"] = tuple(data.get("mrope_section", ()))
        data["head_drop_layers"] = tuple(data.get("head_drop_layers", ()))
        return cls(**data)


def build_model(design: Design, tokenizer, seed: int):
    """A real Qwen2.5-VL built from a tiny config; head_dim follows hidden_size / heads as the attention uses."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    text = dict(design.text)
    if "hidden_size" in text and "num_attention_heads" in text:
        text.setdefault("head_dim", text["hidden_size"] // text["num_attention_heads"])
    config = tiny.make_config(tokenizer, text=text, vision=design.vision, initializer_range=design.init_range,
                              rope_theta=design.rope_theta, mrope_section=list(design.mrope_section) or None)
    with seeded(seed):
        model = Qwen2_5_VLForConditionalGeneration(config).to(torch.float32)
    return model


# ---------------------------------------------------------------- data stream

def train_scene(seed: int, step: int, i: int, batch_size: int, spec: DemoSpec) -> Scene:
    """Scene i of training step `step` for this training seed (never overlaps the held-out stream)."""
    scene_id = seed * 1_000_000_000 + step * batch_size + i
    return generate_scene(scene_id, TRAIN_SCENE_SEED, spec.scene_config())


def referents(scene: Scene) -> list[int]:
    """Objects that "the <colour> <shape>" names uniquely in this scene (the scene's own target among them)."""
    keys = [(o.colour, o.shape) for o in scene.objects]
    return [i for i, k in enumerate(keys) if keys.count(k) == 1]


def as_target(scene: Scene, index: int) -> Scene:
    """The same image, asking for object `index`."""
    o = scene.objects[index]
    return Scene(scene_id=scene.scene_id, image=scene.image, objects=scene.objects, target=index,
                 expression=f"the {o.colour} {o.shape}")


class Batches:
    """Training batches built in a helper thread (pure function of seed and step, so threading changes nothing).

    With `refs_per_image` > 1 one image serves several sequences, each naming a different object of it: the
    vision tower runs once per image, and the model cannot lower the loss without reading the expression.
    """

    def __init__(self, encoder: FastEncoder, design: Design, seed: int, start: int, stop: int, depth: int = 3):
        self.encoder, self.design, self.seed = encoder, design, seed
        self.q: queue.Queue = queue.Queue(maxsize=depth)
        self.thread = threading.Thread(target=self._fill, args=(start, stop), daemon=True)
        self.thread.start()

    def sequences(self, step: int) -> tuple[list[Scene], list[Scene], list[int]]:
        """(images' scenes, per-sequence scenes, per-sequence image index) for this step."""
        d = self.design
        spec = d.scene_spec(step)
        rng = np.random.default_rng([self.seed, step, 7])
        images: list[Scene] = []
        seqs: list[Scene] = []
        index: list[int] = []
        i = 0
        while len(seqs) < d.batch_size:
            scene = train_scene(self.seed, step, i, d.batch_size, spec)
            i += 1
            if d.refs_per_image <= 1:
                picks = [scene.target]
            else:
                cands = referents(scene)
                picks = [cands[j] for j in rng.permutation(len(cands))[: d.refs_per_image]]
            picks = picks[: d.batch_size - len(seqs)]
            images.append(scene)
            for t in picks:
                seqs.append(as_target(scene, t))
                index.append(len(images) - 1)
        return images, seqs, index

    def make(self, step: int) -> dict[str, torch.Tensor]:
        d, enc = self.design, self.encoder
        images, seqs, index = self.sequences(step)
        pixels = np.stack([decoded_image(s, d.spec) for s in images])
        input_ids = torch.stack([enc.input_ids(s.expression) for s in seqs])
        return {
            "input_ids": input_ids,
            "mm_token_type_ids": enc.mm_token_type_ids.expand(len(seqs), -1).clone(),
            "pixel_values": enc.pixel_values(pixels),
            "image_grid_thw": enc.grid_thw.expand(len(images), -1).clone(),
            "image_index": torch.tensor(index),
            "answers": torch.tensor([answer_token_ids(enc.tokenizer, d.spec.answer_box(s.target_object.bbox))
                                     for s in seqs]),
        }

    def _fill(self, start: int, stop: int) -> None:
        for step in range(start, stop):
            self.q.put(self.make(step))

    def __next__(self) -> dict[str, torch.Tensor]:
        return self.q.get()


def forward_hidden(model, batch: dict[str, torch.Tensor], position_ids: torch.Tensor) -> torch.Tensor:
    """Last hidden states of prompt + teacher-forced answer; the vision tower runs once per distinct image."""
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    ans = batch["answers"]
    inp = torch.cat([batch["input_ids"], ans[:, :-1]], dim=1)
    vis = model.model.get_image_features(batch["pixel_values"], batch["image_grid_thw"])
    feats = torch.stack(list(vis.pooler_output))[batch["image_index"]]
    mm = {"image": BaseModelOutputWithPooling(pooler_output=tuple(feats.unbind(0)))}
    pos = position_ids.expand(-1, inp.shape[0], -1)
    out = model.model(input_ids=inp, attention_mask=torch.ones_like(inp), position_ids=pos,
                      mm_encoder_outputs=mm, use_cache=False)
    return out.last_hidden_state


def rope_positions(model, encoder: FastEncoder, answer_len: int) -> torch.Tensor:
    """3D M-RoPE positions of prompt + teacher-forced answer: identical for every sample (one prompt length)."""
    ids = torch.cat([encoder.template, torch.zeros(answer_len - 1, dtype=torch.long)])[None]
    mm = torch.cat([encoder.mm_token_type_ids, torch.zeros(answer_len - 1, dtype=torch.long)])[None]
    pos, _ = model.model.get_rope_index(ids, mm_token_type_ids=mm, image_grid_thw=encoder.grid_thw[None])
    return pos


# ---------------------------------------------------------------- loss and regularisers

class SoftTargets:
    """Target distributions for the answer tokens: one-hot, or Gaussian over coordinate values for coordinates."""

    def __init__(self, tokenizer, spec: DemoSpec, sigma: float):
        values = spec.coord_values()
        self.sigma = sigma
        self.values = torch.tensor(values, dtype=torch.float32)
        self.value_ids = torch.tensor(tokenizer.convert_tokens_to_ids([str(v) for v in values]))
        self.id_to_value = {int(i): float(v) for i, v in zip(self.value_ids, values)}
        self.vocab = len(tokenizer)

    def loss(self, logits: torch.Tensor, answers: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(logits.float(), dim=-1)
        if self.sigma <= 0:
            return -logp.gather(-1, answers[..., None]).mean()
        target = torch.zeros_like(logp)
        target.scatter_(-1, answers[..., None], 1.0)
        is_coord = torch.isin(answers, self.value_ids)
        if is_coord.any():
            vals = torch.tensor([self.id_to_value[int(t)] for t in answers[is_coord]])
            w = torch.exp(-0.5 * ((self.values[None, :] - vals[:, None]) / self.sigma) ** 2)
            w = w / w.sum(-1, keepdim=True)
            soft = torch.zeros(len(vals), self.vocab)
            soft[:, self.value_ids] = w
            target[is_coord] = soft
        return -(target * logp).sum(-1).mean()


class HeadDrop:
    """Zero each (sample, layer, head) output slice with probability p during training, without rescaling."""

    def __init__(self, model, p: float, generator: torch.Generator, layers: tuple = ()):
        from vrh_lmms.demo.probe import text_layers

        self.p, self.gen, self.handles, self.active = p, generator, [], False
        if p <= 0:
            return
        for index, layer in enumerate(text_layers(model)):
            if layers and index not in layers:
                continue
            attn = layer.self_attn
            n_heads = attn.o_proj.in_features // attn.head_dim

            def hook(module, args, n_heads=n_heads, hd=attn.head_dim):
                if not self.active:
                    return None
                x = args[0]
                keep = (torch.rand(x.shape[0], 1, n_heads, 1, generator=self.gen) >= self.p).to(x.dtype)
                x = (x.view(*x.shape[:2], n_heads, hd) * keep).view_as(x)
                return (x,) + tuple(args[1:])

            self.handles.append(attn.o_proj.register_forward_pre_hook(hook))


def group_lasso(model) -> torch.Tensor:
    """Sum over heads of the Frobenius norm of all of a head's weights: its q, k and v rows (with their biases)
    and its `o_proj` columns. Unused heads go to zero as a whole, so a pruned head also stops attending (a head
    with live q/k but a dead o_proj would still look like a retrieval head to attention-based scores).
    Needs one kv head per query head (num_key_value_heads == num_attention_heads)."""
    from vrh_lmms.demo.probe import text_layers

    total = torch.zeros(())
    for layer in text_layers(model):
        attn = layer.self_attn
        hd = attn.head_dim
        n_heads = attn.o_proj.in_features // hd
        sq = attn.o_proj.weight.view(attn.o_proj.weight.shape[0], n_heads, hd).pow(2).sum(dim=(0, 2))
        for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
            if proj.out_features != n_heads * hd:
                raise ValueError("group lasso needs num_key_value_heads == num_attention_heads")
            sq = sq + proj.weight.view(n_heads, hd, -1).pow(2).sum(dim=(1, 2))
            if proj.bias is not None:
                sq = sq + proj.bias.view(n_heads, hd).pow(2).sum(dim=1)
        total = total + sq.clamp_min(1e-12).sqrt().sum()
    return total


def lasso_weight(step: int, d: "Design") -> float:
    """Group-lasso strength: 0 before `lasso_from`, then a linear ramp to `group_lasso` over `lasso_ramp` steps."""
    if d.group_lasso <= 0 or step < d.lasso_from:
        return 0.0
    return d.group_lasso * min(1.0, (step - d.lasso_from + 1) / max(1, d.lasso_ramp))


def lr_at(step: int, d: Design) -> float:
    if step < d.warmup:
        return d.lr * (step + 1) / d.warmup
    t = (step - d.warmup) / max(1, d.steps - d.warmup)
    return d.lr * (d.min_lr_frac + (1 - d.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


# ---------------------------------------------------------------- training

def train(design: Design, out_dir: str | Path, seed: int, *, threads: int = 1,
          log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train, evaluate on held-out scenes every `eval_every` steps, save the checkpoint; returns the summary."""
    from vrh_lmms.demo import probe

    torch.set_num_threads(threads)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec = design.spec
    tokenizer = tiny.make_tokenizer()
    processor = tiny.make_processor(tokenizer, min_pixels=spec.pixels, max_pixels=spec.pixels)
    model = build_model(design, tokenizer, seed)
    model.set_attn_implementation({"text_config": "sdpa", "vision_config": "sdpa"})
    n_params = sum(p.numel() for p in model.parameters())
    eval_scenes = probe.held_out_scenes(spec, design.eval_n)
    encoder = FastEncoder(processor, spec, eval_scenes[0])
    eval_prep = probe.prepare(encoder, eval_scenes)
    targets = SoftTargets(tokenizer, spec, design.coord_sigma)
    gen = torch.Generator().manual_seed(seed)
    drop = HeadDrop(model, design.head_drop, gen, tuple(design.head_drop_layers))
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.ndim >= 2 and "embed" not in name else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": design.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=design.lr, betas=(0.9, 0.98))
    prompt_len = encoder.seq_len
    position_ids = None  # filled on the first batch: identical for every sample
    batches = Batches(encoder, design, seed, 0, design.steps)
    spec.save(out)
    log_path = out / "train_log.jsonl"
    log_f = log_path.open("w")
    t0 = time.time()
    history: list[dict[str, Any]] = []
    run_loss = 0.0
    losses: list[float] = []
    log(f"[{design.name} seed {seed}] {n_params / 1e6:.2f}M params, {design.steps} steps, batch {design.batch_size}")
    for step in range(design.steps):
        batch = next(batches)
        if position_ids is None:
            position_ids = rope_positions(model, encoder, batch["answers"].shape[1])
        for g in opt.param_groups:
            g["lr"] = lr_at(step, design)
        model.train()
        drop.active = True
        hidden = forward_hidden(model, batch, position_ids)
        drop.active = False
        logits = model.lm_head(hidden[:, prompt_len - 1:])
        loss = targets.loss(logits, batch["answers"])
        lam = lasso_weight(step, design)
        total = loss + (lam * group_lasso(model) if lam > 0 else 0.0)
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), design.grad_clip)
        opt.step()
        losses.append(float(loss.detach()))
        run_loss += losses[-1]
        last = step + 1 == design.steps
        if (step + 1) % design.eval_every == 0 or last:
            model.eval()
            res = probe.evaluate(model, tokenizer, eval_prep)
            rec = {"step": step + 1, "loss": run_loss / ((step % design.eval_every) + 1), "acc50": res.acc50,
                   "parse_fail": res.parse_rate, "miou": float(res.ious.mean()), "seconds": time.time() - t0}
            run_loss = 0.0
            history.append(rec)
            log_f.write(json.dumps(rec) + "\n")
            log_f.flush()
            log(f"[{design.name} seed {seed}] step {rec['step']} loss {rec['loss']:.3f} acc50 {100 * res.acc50:.1f}% "
                f"parse_fail {100 * res.parse_rate:.1f}% mIoU {rec['miou']:.3f} ({rec['seconds']:.0f}s)")
            save_checkpoint(out, model, processor, tokenizer)  # the latest weights, for probing mid-run
    log_f.close()
    model.eval()
    save_checkpoint(out, model, processor, tokenizer)
    summary = {"design": design.to_dict(), "seed": seed, "params": n_params, "seconds": time.time() - t0,
               "final": history[-1] if history else None, "torch_threads": threads, "history": history}
    (out / DESIGN_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    return {**summary, "losses": losses}


def load_demo_model(path: str | Path, dtype: torch.dtype = torch.float32):
    """Model, processor (loaded as the backend loads it, min = max pixels) and spec of a saved demo checkpoint."""
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    spec = DemoSpec.load(path)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(path, dtype=dtype).eval()
    model.set_attn_implementation({"text_config": "sdpa", "vision_config": "sdpa"})
    processor = AutoProcessor.from_pretrained(path, min_pixels=spec.pixels, max_pixels=spec.pixels)
    return model, processor, spec


def main(argv=None) -> int:
    """`python -m vrh_lmms.demo.train --design NAME --seed N --out DIR [--steps S]` (research entry point)."""
    import argparse

    from vrh_lmms.demo.designs import get_design

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--design", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    design = get_design(args.design, steps=args.steps)
    train(design, args.out, args.seed, threads=args.threads, log=lambda s: print(s, flush=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
