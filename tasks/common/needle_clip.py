"""`vrh_synth_needle_clip`: a short clip of synthetic scenes, one stretch of which shows the needle, and a question
only the needle answers.

Each doc's clip (mp4, written once into the cache folder, vrh_lmms.base.synth.cache.cache_root) shows `scenes` scenes of
the demo's generator (vrh_lmms.base.synth.scenes) for `frames_per_scene` frames each at `fps`. The haystack scenes never
draw the needle shape; the needle scene (a seeded position) holds one object of that shape in a seeded colour. The
question "What colour is the <shape> ?" (the demo's VQA wording) needs the needle; the doc's evidence
(`vrh_evidence`, kind `video`) is the needle's time span: [first / fps, last / fps] seconds of its frames.
Docs from ``VRH_CLIP_CONFIG`` (JSON text or file), else DEFAULTS; `scene` holds SceneConfig settings (e.g. the demo
model's, vrh_lmms.base.synth.demo_spec) for every scene. Scored by exact match of the colour word.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import av
import datasets
import numpy as np

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.synth.cache import cache_root
from vrh_lmms.base.synth.scenes import SHAPES, SceneConfig, generate_scene
from vrh_lmms.tasks.common.records import vqa_result
from vrh_lmms.tasks.common.sources import SourceError, env_json_config

TASK = "vrh_synth_needle_clip"
CONFIG_ENV = "VRH_CLIP_CONFIG"
DEFAULTS = {"n": 50, "seed": 0, "scenes": 6, "frames_per_scene": 4, "fps": 4, "size": 224, "needle_shape": "ring",
            "scene": {}}


def clip_config() -> dict[str, Any]:
    cfg = env_json_config(CONFIG_ENV, DEFAULTS)
    known = {f for f in SceneConfig.__dataclass_fields__} - {"image_size"}
    if not isinstance(cfg["scene"], dict) or set(cfg["scene"]) - known:
        raise SourceError(f"{CONFIG_ENV}: scene must map SceneConfig settings ({', '.join(sorted(known))})")
    shapes = tuple(cfg["scene"].get("shapes", SHAPES))
    if cfg["needle_shape"] not in shapes or len(shapes) < 2:
        raise SourceError(f"{CONFIG_ENV}: needle_shape {cfg['needle_shape']!r} is not one of {', '.join(shapes)} "
                          f"(the haystack needs another)")
    for key in ("n", "scenes", "frames_per_scene", "fps", "size"):
        if int(cfg[key]) < 1:
            raise SourceError(f"{CONFIG_ENV}: {key} must be positive, got {cfg[key]}")
    return cfg


def clip_folder(cfg: Mapping[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(dict(cfg), sort_keys=True).encode()).hexdigest()[:12]
    return cache_root() / "needle_clip" / digest


def clip_frames(i: int, cfg: Mapping[str, Any]) -> tuple[list[np.ndarray], int, str]:
    """Doc i's frames (RGB uint8), the needle scene's position and its colour: a pure function of (seed, i)."""
    rng = np.random.default_rng([int(cfg["seed"]), i])
    size, needle = int(cfg["size"]), str(cfg["needle_shape"])
    scale = dict(image_size=size, min_size=max(8, size * 28 // 224), max_size=max(12, size * 64 // 224))
    scale.update({k: tuple(v) if isinstance(v, list) else v for k, v in cfg["scene"].items()})
    shapes = tuple(scale.pop("shapes", SHAPES))
    hay = SceneConfig(**scale, shapes=tuple(s for s in shapes if s != needle))
    at = int(rng.integers(int(cfg["scenes"])))
    frames, colour = [], ""
    for k in range(int(cfg["scenes"])):
        scene_id = i * int(cfg["scenes"]) + k
        if k == at:
            scene = generate_scene(scene_id, int(cfg["seed"]),
                                   SceneConfig(**{**scale, "min_objects": 1, "max_objects": 1},
                                               shapes=(needle,)))
            colour = scene.objects[0].colour
        else:
            scene = generate_scene(scene_id, int(cfg["seed"]), hay)
        frames += [np.asarray(scene.image.convert("RGB"))] * int(cfg["frames_per_scene"])
    return frames, at, colour


def write_mp4(path: Path, frames: list[np.ndarray], fps: int) -> None:
    """H.264 (lossless crf 0, yuv420p) at a constant `fps`, written to a temp name and renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.mp4")
    h, w = frames[0].shape[:2]
    with av.open(str(tmp), "w") as out:
        stream = out.add_stream("libx264", rate=int(fps), options={"crf": "0"})
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        for frame in frames:
            out.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        out.mux(stream.encode())
    os.replace(tmp, path)


def make_doc(i: int, cfg: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    frames, at, colour = clip_frames(i, cfg)
    path = folder / f"clip_{int(cfg['seed'])}_{i}.mp4"
    if not path.is_file():
        write_mp4(path, frames, int(cfg["fps"]))
    per, fps = int(cfg["frames_per_scene"]), int(cfg["fps"])
    seconds = [at * per / fps, (at * per + per - 1) / fps]
    question = f"What colour is the {cfg['needle_shape']} ?"
    key = f"clip_{cfg['seed']}_{i}"
    return {"vrh_prompt": question, "vrh_target": colour, "vrh_videos": [str(path)],
            "vrh_evidence": {"kind": "video", "seconds": seconds, "query": question},
            "vrh_needle_scene": at, "image_id": key, "question_id": key}


def vrh_synth_needle_clip(dataset):
    """Docs of vrh_synth_needle_clip (lmms-eval passes only the placeholder dataset); clips written on first use."""
    cfg = clip_config()
    folder = clip_folder(cfg)
    rows = [make_doc(i, cfg, folder) for i in range(int(cfg["n"]))]
    return datasets.Dataset.from_list([{**r, "vrh_key": f"{TASK}#{i}"} for i, r in enumerate(rows)])


def doc_to_visual(doc: Mapping[str, Any]) -> list[str]:
    """The clip's path (the qwen2_5_vl backends read `.mp4` paths as videos); a missing file is refused."""
    for path in doc["vrh_videos"]:
        if not os.path.isfile(path):
            raise VRHError(f"{TASK}: video file {path} does not exist")
    return list(doc["vrh_videos"])


def read_colour(reply: str) -> str | None:
    words = reply.replace("<|im_end|>", " ").strip().rstrip(".").lower().split()
    return " ".join(words) or None


def process_results(doc: Mapping[str, Any], results: list[str]) -> dict[str, Any]:
    reply = results[0] if results else ""
    pred = read_colour(reply)
    return vqa_result(image_id=doc["image_id"], pred=pred, target=doc["vrh_target"],
                      correct=pred == str(doc["vrh_target"]), raw=reply, question_type="needle_clip",
                      question_id=doc.get("question_id"))
