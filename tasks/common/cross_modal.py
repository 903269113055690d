"""`vrh_synth_fact_text` / `_image` / `_audio`: one fact, a count, stated in one modality; the same question asks it.

Doc i of seed s carries the fact (count n in 1..value_max, object "the <colour> <shape>"), a pure function of (s, i)
alone, so doc i of the three tasks states the same count (cross-modal comparisons pair them by doc id):
- text: the sentence `there are n <colour> <shape> objects .` (`there is 1 ... object .`) among `distractors`
  sentences about other objects; evidence `{"kind": "text", ...}`, the sentence's span (without its full stop);
- image: a synthetic picture (vrh_lmms.base.synth.scenes' shapes and renderer) with n copies of the object among
  `distractors` other objects (each shares its colour or its shape, so counting needs both); evidence
  `{"kind": "image_box", "index": 0, "box": ...}`, the one box enclosing the n copies (distractors may lie in it);
- audio: n high beeps among `distractors` low hums (tasks/common/audio_needle.py's renderer); the audio cannot say
  a colour, so the object asked is "high beeps"; evidence `{"kind": "audio", "seconds": [t0, t1]}`, the beeps' run.
Text and image ask `how many <colour> <shape> objects are there ? answer with a number .`, audio the audio needle's
question. Docs from ``VRH_FACT_CONFIG`` (JSON text or file: n, seed, value_max, distractors, seconds, size,
text_image), else 50 docs of seed 0, counts 1-5, 4 distractors, 6 s clips, 224 px pictures. `text_image: N` shows
a plain N x N grey picture beside the text doc (the evidence stays the sentence): lmms-eval 0.7.3's qwen2_5_omni
backend sends only the system prompt when a doc has no media, so the text task needs it on vrh_qwen25_omni.
Scored by exact match of the first integer in the reply; VQA records (`question_type` `fact_<modality>`, plus
`fact_count`, `fact_object`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import datasets
import numpy as np
from PIL import Image, ImageDraw

from vrh_lmms.base.synth.scenes import COLOURS, SHAPES, SceneConfig, SceneObject, _background, _draw, _place
from vrh_lmms.tasks.common import audio_needle as audio
from vrh_lmms.tasks.common.records import vqa_result
from vrh_lmms.tasks.common.sources import SourceError, env_json_config

CONFIG_ENV = "VRH_FACT_CONFIG"
MODALITIES = ("text", "image", "audio")
DEFAULTS: dict[str, Any] = {"n": 50, "seed": 0, "value_max": 5, "distractors": 4, "seconds": 6.0, "size": 224,
                            "text_image": 0}
QUESTION = "how many {colour} {shape} objects are there ? answer with a number ."
SENTENCE = "there are {count} {colour} {shape} objects"
SENTENCE_ONE = "there is 1 {colour} {shape} object"
# per-modality stream tags: the layout of each modality is drawn from its own stream, the fact from none of them
_FACT, _STREAM = 29, {"text": 1, "image": 2, "audio": 3}


def fact_config() -> dict[str, Any]:
    cfg = env_json_config(CONFIG_ENV, DEFAULTS)
    longest = int(cfg["value_max"]) * (audio.BEEP_ON + audio.BEEP_OFF)
    if not 1 <= int(cfg["value_max"]) <= 9 or float(cfg["seconds"]) < longest + 0.4:
        raise SourceError(f"{CONFIG_ENV}: need 1 <= value_max <= 9 and seconds >= {longest + 0.4:.2f} "
                          f"(the longest beep run plus 0.2 s each side)")
    if int(cfg["n"]) < 1 or int(cfg["distractors"]) < 0 or int(cfg["size"]) < 112 or int(cfg["text_image"]) < 0:
        raise SourceError(f"{CONFIG_ENV}: need n >= 1, distractors >= 0, size >= 112 and text_image >= 0, got "
                          f"{cfg['n']}, {cfg['distractors']}, {cfg['size']}, {cfg['text_image']}")
    return cfg


def fact(i: int, cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The fact of doc i: a pure function of (seed, i) and value_max, the same in every modality."""
    rng = np.random.default_rng([int(cfg["seed"]), i, _FACT])
    count = int(rng.integers(1, int(cfg["value_max"]) + 1))
    colour, shape = str(rng.choice(list(COLOURS))), str(rng.choice(list(SHAPES)))
    return {"count": count, "colour": colour, "shape": shape}


def _others(rng: np.random.Generator, colour: str, shape: str, k: int) -> list[tuple[str, str]]:
    """k (colour, shape) pairs other than the fact's, each sharing its colour or its shape (so reading one attribute
    never suffices); distinct from each other while the pool lasts."""
    pool = [(colour, s) for s in SHAPES if s != shape] + [(c, shape) for c in COLOURS if c != colour]
    picks = rng.permutation(len(pool))
    return [pool[int(picks[j % len(pool)])] for j in range(k)]


def _base(i: int, cfg: Mapping[str, Any], modality: str, f: Mapping[str, Any]) -> dict[str, Any]:
    key = f"fact_{cfg['seed']}_{i}"
    return {"vrh_target": str(f["count"]), "vrh_modality": modality, "vrh_fact": json.dumps(f, sort_keys=True),
            "image_id": key, "question_id": key}


def _sentence(count: int, colour: str, shape: str) -> str:
    return (SENTENCE_ONE if count == 1 else SENTENCE).format(count=count, colour=colour, shape=shape)


def text_doc(i: int, cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The fact as one sentence among distractor sentences; evidence its span."""
    f = fact(i, cfg)
    rng = np.random.default_rng([int(cfg["seed"]), i, _FACT, _STREAM["text"]])
    others = _others(rng, f["colour"], f["shape"], int(cfg["distractors"]))
    sentences = [_sentence(int(rng.integers(1, int(cfg["value_max"]) + 1)), c, s) for c, s in others]
    needle = _sentence(f["count"], f["colour"], f["shape"])
    at = int(rng.integers(len(sentences) + 1))
    sentences.insert(at, needle)
    query = QUESTION.format(**f)
    prompt = " ".join(f"{s} ." for s in sentences) + f" {query}"
    start = sum(len(s) + 3 for s in sentences[:at])
    assert prompt[start:start + len(needle)] == needle
    side = int(cfg["text_image"])
    return _base(i, cfg, "text", f) | {
        "vrh_prompt": prompt,
        "vrh_evidence": {"kind": "text", "text": needle, "start": start, "context": prompt, "query": query}} | (
        {"vrh_image_size": [side, side]} if side else {})


def image_plan(i: int, cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The picture's objects (shape, colour, COCO [x, y, w, h]): the fact's n copies first, then the distractors."""
    f = fact(i, cfg)
    rng = np.random.default_rng([int(cfg["seed"]), i, _FACT, _STREAM["image"]])
    size = int(cfg["size"])
    attrs = [(f["colour"], f["shape"])] * f["count"] + _others(rng, f["colour"], f["shape"], int(cfg["distractors"]))
    scene = SceneConfig(image_size=size, min_size=round(24 * size / 224), max_size=round(40 * size / 224))
    boxes = _place(rng, scene, len(attrs))
    return {"size": size, "objects": [[s, c, list(b)] for (c, s), b in zip(attrs, boxes)]}


def image_doc(i: int, cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The fact as n copies of the object in a picture; evidence the box enclosing them (image 0)."""
    f = fact(i, cfg)
    plan = image_plan(i, cfg)
    copies = [b for _, _, b in plan["objects"][:f["count"]]]
    box = [min(b[0] for b in copies), min(b[1] for b in copies),
           max(b[0] + b[2] for b in copies), max(b[1] + b[3] for b in copies)]
    query = QUESTION.format(**f)
    side = plan["size"]
    return _base(i, cfg, "image", f) | {
        "vrh_prompt": query, "vrh_image_plan": json.dumps(plan), "vrh_image_sizes": [[side, side]],
        "vrh_evidence": {"kind": "image_box", "index": 0, "box": [float(v) for v in box], "query": query}}


def audio_doc(i: int, cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The fact as n high beeps among low hums (the audio needle's plan and renderer); evidence the beeps' run."""
    f = fact(i, cfg)
    rng = np.random.default_rng([int(cfg["seed"]), i, _FACT, _STREAM["audio"]])
    seconds = float(cfg["seconds"])
    plan = audio.clip_plan(rng, seconds, int(f["count"]), int(cfg["distractors"]), [int(cfg["seed"]), i, _FACT])
    samples = int(round(seconds * audio.SAMPLING_RATE))
    return _base(i, cfg, "audio", f) | {
        "vrh_prompt": audio.QUESTION, "vrh_audio_plan": json.dumps(plan),
        "vrh_evidence": {"kind": "audio", "seconds": plan["needle"], "samples": samples, "query": audio.QUESTION}}


MAKERS = {"text": text_doc, "image": image_doc, "audio": audio_doc}


def make_doc(modality: str, i: int, cfg: Mapping[str, Any]) -> dict[str, Any]:
    if modality not in MAKERS:
        raise SourceError(f"modality {modality!r} is not one of {', '.join(MODALITIES)}")
    return MAKERS[modality](i, cfg)


def _dataset(modality: str):
    cfg = fact_config()
    task = f"vrh_synth_fact_{modality}"
    rows = [make_doc(modality, i, cfg) for i in range(int(cfg["n"]))]
    return datasets.Dataset.from_list([{**r, "vrh_key": f"{task}#{i}"} for i, r in enumerate(rows)])


def vrh_synth_fact_text(dataset):
    """Docs of vrh_synth_fact_text (lmms-eval passes only the placeholder dataset)."""
    return _dataset("text")


def vrh_synth_fact_image(dataset):
    """Docs of vrh_synth_fact_image."""
    return _dataset("image")


def vrh_synth_fact_audio(dataset):
    """Docs of vrh_synth_fact_audio."""
    return _dataset("audio")


def render_image(plan: Mapping[str, Any]):
    """The picture of a plan, drawn with the synthetic scenes' renderer on their grey background."""

    scene = SceneConfig(image_size=int(plan["size"]))
    image = _background(scene)
    draw = ImageDraw.Draw(image)
    for shape, colour, bbox in plan["objects"]:
        _draw(draw, SceneObject(shape=shape, colour=colour, bbox=tuple(bbox)), scene)
    return image


def doc_to_visual(doc: Mapping[str, Any]) -> list:
    """The picture for image, the clip (array + rate) for audio; for text nothing, or with `text_image` a plain grey
    picture that holds nothing (lmms-eval 0.7.3's qwen2_5_omni backend drops the text of a prompt without media)."""
    if doc["vrh_modality"] == "image":
        return [render_image(json.loads(doc["vrh_image_plan"])).convert("RGB")]
    if doc["vrh_modality"] == "audio":
        return audio.doc_to_visual(doc)
    size = doc.get("vrh_image_size")
    if not size:
        return []
    return [Image.new("RGB", (int(size[0]), int(size[1])), (128, 128, 128))]


def process_results(doc: Mapping[str, Any], results: list[str]) -> dict[str, Any]:
    reply = results[0] if results else ""
    pred = audio.read_count(reply)
    f = json.loads(doc["vrh_fact"])
    return vqa_result(image_id=doc["image_id"], pred=pred, target=doc["vrh_target"],
                      correct=pred == str(doc["vrh_target"]), raw=reply,
                      question_type=f"fact_{doc['vrh_modality']}", question_id=doc.get("question_id"),
                      fact_count=int(f["count"]), fact_object=f"{f['colour']} {f['shape']}")
