"""Held-out grounding evaluation of a demo checkpoint: greedy Acc@0.5, parse failures and localisation, with chosen
heads ablated or not. The trainer's evaluations and the research probes both measure through it.

Inputs mirror the lmms-eval `qwen2_5_vl` backend (see `research.demo_model.data`); decoding is greedy, as the backend's
default.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from research.demo_model.data import FastEncoder, decoded_image
from research.demo_model.model_heads import Head, ablate
from vrh_lmms.base.boxes.geometry import iou, xywh_to_xyxy
from vrh_lmms.base.synth.demo_spec import EVAL_SCENE_SEED, DemoSpec
from vrh_lmms.base.synth.scenes import Scene, generate_scene

_NUM = r"\s*(-?\d+(?:\.\d+)?)\s*"
_BOX = re.compile(r"\[" + ",".join([_NUM] * 4) + r"\]")


def parse_box(text: str) -> list[float] | None:
    """First bracketed list of four numbers (`[x1, y1, x2, y2]`, tokens may be space separated)."""
    m = _BOX.search(text)
    return [float(v) for v in m.groups()] if m else None


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
