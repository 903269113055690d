"""`vrh_synth_haystack`: the needle image among N synthetic scenes, built offline from vrh_lmms.base.synth.

Each doc shows `n_images` scenes; exactly one (the needle image, a seeded position) holds the referred object
("the red circle"), and it holds it once; every other scene is drawn from the seeded stream until it has no object
of that colour and shape. Two modes (``VRH_HAYSTACK_CONFIG``, JSON text or file: n, seed, n_images, mode, sizes,
scene):
- `locate`: the model gives the object's box in the needle image; scored as the grounding tasks (Acc@0.5 records
  in that image's original pixels). Evidence `{"kind": "image_box", "index": k, "box": [x1, y1, x2, y2]}`.
- `which`: the model names the needle image's number (1-based; the reply's first number, unless a bracket opens
  before it); exact match, VQA records. Evidence
  `{"kind": "image", "index": k}`.
Every doc carries `vrh_image_sizes` ([w, h] per image, visual order) and `vrh_needle_index` (k, 0-based). Images
are redrawn from (seed, scene id, size) when a doc is read, so nothing is cached. `sizes` lists square sides the
images take in turn (different sizes exercise the per-image layouts); object sizes scale with the side.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import datasets
import numpy as np

from vrh_lmms.base.boxes import context
from vrh_lmms.base.boxes.backends import backend_box_params, calling_backend
from vrh_lmms.base.boxes.geometry import iou
from vrh_lmms.base.synth.scenes import SceneConfig, generate_scene
from vrh_lmms.tasks.common.grounding import _convention_for, _scoring_convention
from vrh_lmms.tasks.common.records import grounding_result, vqa_result
from vrh_lmms.tasks.common.sources import SourceError, env_json_config

TASK = "vrh_synth_haystack"
CONFIG_ENV = "VRH_HAYSTACK_CONFIG"
MODES = ("locate", "which")
DEFAULTS: dict[str, Any] = {"n": 50, "seed": 2, "n_images": 4, "mode": "locate", "sizes": [224], "scene": {}}
WHICH_PROMPT = "in which image is {expression} ? answer with a single number from 1 to {n} ."
LOCATE_LEAD = "only one of the images shows {expression} . "
MAX_DRAWS = 200  # haystack scenes drawn per slot before giving up


def haystack_config() -> dict[str, Any]:
    cfg = env_json_config(CONFIG_ENV, DEFAULTS)
    if cfg["mode"] not in MODES:
        raise SourceError(f"{CONFIG_ENV}: mode {cfg['mode']!r} is not one of {', '.join(MODES)}")
    if int(cfg["n"]) < 1 or int(cfg["n_images"]) < 2:
        raise SourceError(f"{CONFIG_ENV}: n must be >= 1 and n_images >= 2, got {cfg['n']}, {cfg['n_images']}")
    if not cfg["sizes"] or any(int(s) < 56 for s in cfg["sizes"]):
        raise SourceError(f"{CONFIG_ENV}: sizes must list square sides of at least 56 px, got {cfg['sizes']}")
    return cfg


def _scene_config(cfg: Mapping[str, Any], size: int):
    kw = {k: tuple(v) if k in ("colours", "shapes", "background") else v for k, v in dict(cfg["scene"]).items()}
    base = SceneConfig()  # object sizes scale with the side, so small scenes fit their objects as 224 px ones do
    scaled = {"min_size": round(base.min_size * size / base.image_size),
              "max_size": round(base.max_size * size / base.image_size)}
    return SceneConfig(**{**scaled, **kw, "image_size": int(size)})


def scene_image(seed: int, scene_id: int, size: int, scene: Mapping[str, Any]):
    return generate_scene(int(scene_id), int(seed), _scene_config({"scene": scene}, size)).image


def make_doc(i: int, cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Doc i: a pure function of (seed, i) and the config."""
    seed, n_images = int(cfg["seed"]), int(cfg["n_images"])
    rng = np.random.default_rng([seed, i, 7])
    sides = [int(s) for s in cfg["sizes"]]
    turn = int(rng.integers(len(sides)))  # the sizes in turn from a seeded start: a doc shows each when it can
    sizes = [sides[(turn + j) % len(sides)] for j in range(n_images)]
    k = int(rng.integers(n_images))
    base = i * n_images * MAX_DRAWS
    needle = generate_scene(base + k * MAX_DRAWS, seed, _scene_config(cfg, sizes[k]))
    obj = needle.target_object
    scene_ids = []
    for j in range(n_images):
        if j == k:
            scene_ids.append(needle.scene_id)
            continue
        for draw in range(1, MAX_DRAWS):
            sid = base + j * MAX_DRAWS + draw
            scene = generate_scene(sid, seed, _scene_config(cfg, sizes[j]))
            if not any(o.colour == obj.colour and o.shape == obj.shape for o in scene.objects):
                scene_ids.append(sid)
                break
        else:
            raise SourceError(f"{CONFIG_ENV}: no scene without {needle.expression} in {MAX_DRAWS} draws")
    x, y, w, h = obj.bbox
    box = [float(x), float(y), float(x + w), float(y + h)]
    expression = needle.expression
    if cfg["mode"] == "locate":
        evidence: dict[str, Any] = {"kind": "image_box", "index": k, "box": box, "query": expression}
    else:
        evidence = {"kind": "image", "index": k, "query": expression}
    qid = f"haystack_{seed}_{i}"
    return {"vrh_scenes": scene_ids, "vrh_scene_sizes": sizes, "vrh_seed": seed,
            "vrh_scene": json.dumps(dict(cfg["scene"]), sort_keys=True),
            "vrh_image_sizes": [[s, s] for s in sizes], "vrh_needle_index": k, "vrh_evidence": evidence,
            "vrh_mode": cfg["mode"], "expression": expression, "gt_box": box, "image_width": sizes[k],
            "image_height": sizes[k], "vrh_target": str(k + 1),
            "vrh_prompt": WHICH_PROMPT.format(expression=expression, n=n_images),
            "image_id": qid, "question_id": qid}


def vrh_synth_haystack(dataset):
    """Docs of vrh_synth_haystack (lmms-eval passes only the placeholder dataset)."""
    cfg = haystack_config()
    rows = [make_doc(i, cfg) for i in range(int(cfg["n"]))]
    return datasets.Dataset.from_list([{**r, "vrh_key": f"{TASK}#{i}"} for i, r in enumerate(rows)])


def doc_to_visual(doc: Mapping[str, Any]) -> list:
    """The doc's scenes in order, redrawn; notes the backend's resize for box scoring, as grounding does."""
    if doc.get("vrh_key"):
        seen = backend_box_params(calling_backend())
        if seen is not None:
            context.observe(doc["vrh_key"], *seen)
    scene = json.loads(doc.get("vrh_scene") or "{}")
    return [scene_image(doc["vrh_seed"], sid, size, scene).convert("RGB")
            for sid, size in zip(doc["vrh_scenes"], doc["vrh_scene_sizes"])]


def doc_to_text(doc: Mapping[str, Any], lmms_eval_specific_kwargs: Mapping[str, Any] | None = None) -> str:
    """locate: the box convention's request after a line saying one image shows the object; which: the question."""
    if doc["vrh_mode"] == "which":
        return doc["vrh_prompt"]
    resolved = _convention_for(doc, lmms_eval_specific_kwargs)
    return LOCATE_LEAD.format(expression=doc["expression"]) + resolved.convention.prompt(doc["expression"])


def read_number(reply: str, n_images: int) -> str | None:
    """The reply's first whole number, as text, when it lies in 1..n_images; None when there is none, when it is out
    of range, or when a bracket opens before it (a box or list, whose coordinates are not an image's number)."""
    match = re.search(r"\d+", reply or "")
    if match is None or any(b in reply[:match.start()] for b in "[({"):
        return None
    return str(int(match.group())) if 1 <= int(match.group()) <= n_images else None


def process_results(doc: Mapping[str, Any], results: list[str]) -> dict[str, Any]:
    reply = results[0] if results else ""
    k, n_images = int(doc["vrh_needle_index"]), len(doc["vrh_scenes"])
    if doc["vrh_mode"] == "which":
        pred = read_number(reply, n_images)
        return vqa_result(image_id=doc["image_id"], pred=pred, target=doc["vrh_target"],
                          correct=pred == str(doc["vrh_target"]), raw=reply, question_type="haystack_which",
                          question_id=doc.get("question_id"), image_index=k, n_images=n_images)

    resolved = _scoring_convention(doc)
    size = (int(doc["image_width"]), int(doc["image_height"]))
    reading = resolved.convention.read_box(reply, size, **resolved.params)
    score = iou(reading.box, doc["gt_box"]) if reading.box is not None else 0.0
    out = grounding_result(image_id=doc["image_id"], pred_box=reading.box, gt_box=doc["gt_box"], iou=score,
                           n_boxes=reading.n_boxes, convention=resolved.name, convention_source=resolved.source,
                           image_size=size, raw=reply, expression=doc["expression"],
                           question_id=doc.get("question_id"))
    out["vrh_record"].update(image_index=k, n_images=n_images)
    return out
