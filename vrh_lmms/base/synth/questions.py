"""Short VQA questions about one synthetic scene: colour, shape, count, existence.

The demo model learns them beside grounding (research.demo_model.visual_tasks) and `vrh_synth_vqa` evaluates them, so
the paper's cross-task test (grounding heads masked on VQA, Table 3) has a counterpart on the demo model. One
function serves both, so the questions evaluated are the questions trained on (same wording, same answers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vrh_lmms.base.synth.scenes import Scene, SceneConfig

VQA_KINDS: tuple[str, ...] = ("colour", "shape", "count", "exists")


@dataclass(frozen=True)
class Question:
    task: str
    prompt: str  # the user turn's text (the image comes first)
    answer: list[str]
    target: int | None = None  # index of the object the question is about, if one


def vqa_question(scene: Scene, task: str, rng: np.random.Generator, cfg: SceneConfig) -> Question | None:
    """One question of this kind about the scene, or None when the scene has no object it can be asked of."""
    objs = scene.objects
    colours = [o.colour for o in objs]
    shapes = [o.shape for o in objs]
    if task in ("colour", "shape"):  # of an object whose other attribute (shape, colour) is unique
        named_by = shapes if task == "colour" else colours
        cands = [i for i, v in enumerate(named_by) if named_by.count(v) == 1]
        if not cands:
            return None
        i = int(rng.choice(cands))
        if task == "colour":
            return Question("colour", f"What colour is the {shapes[i]} ?", [colours[i]], i)
        return Question("shape", f"What shape is the {colours[i]} object ?", [shapes[i]], i)
    if task == "count":
        if rng.random() < 0.5:
            c = str(rng.choice(cfg.colours))
            return Question("count", f"How many {c} objects are there ?", [str(colours.count(c))])
        s = str(rng.choice(cfg.shapes))
        return Question("count", f"How many {s} objects are there ?", [str(shapes.count(s))])
    if task == "exists":
        c, s = str(rng.choice(cfg.colours)), str(rng.choice(cfg.shapes))
        if rng.random() < 0.5:  # ask about a present object half the time
            i = int(rng.integers(len(objs)))
            c, s = colours[i], shapes[i]
        present = any(o.colour == c and o.shape == s for o in objs)
        return Question("exists", f"Is there a {c} {s} ?", ["yes" if present else "no"])
    raise ValueError(f"unknown visual task {task!r}; known: {', '.join(VQA_KINDS)}")


def evaluation_question(scene: Scene, seed: int, cfg: SceneConfig) -> Question:
    """The one question `vrh_synth_vqa` asks about a scene: kinds in turn by scene id (balanced over a run), drawn
    from a generator seeded by (seed, scene id), so a scene's question does not depend on which others are asked."""
    rng = np.random.default_rng([seed, scene.scene_id])
    first = scene.scene_id % len(VQA_KINDS)
    for kind in VQA_KINDS[first:] + VQA_KINDS[:first]:
        q = vqa_question(scene, kind, rng, cfg)
        if q is not None:
            return q
    raise AssertionError("count and exists questions apply to every scene")
