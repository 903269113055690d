"""Questions about one synthetic scene: grounding (the demo's task) and short VQA on the same image.

Several visual tasks on the same scenes give heads jobs other than fetching a box (naming a colour, a shape,
counting, checking existence), as a real VLM's instruction data does; only grounding is evaluated by the demo.
Each question names its answer tokens; the stop token is added by the encoder.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vrh_lmms.demo.spec import DemoSpec, prompt_for
from vrh_lmms.synth.scenes import Scene

VISUAL_TASKS: tuple[str, ...] = ("ground", "colour", "shape", "count", "exists")


@dataclass(frozen=True)
class Question:
    task: str
    prompt: str  # the user turn's text (the image comes first)
    answer: list[str]
    target: int | None = None  # index of the object the question is about, if one


def ground(scene: Scene, index: int, spec: DemoSpec) -> Question:
    o = scene.objects[index]
    x1, y1, x2, y2 = spec.answer_box(o.bbox)
    answer = ["[", str(x1), ",", str(y1), ",", str(x2), ",", str(y2), "]"]
    return Question("ground", prompt_for(f"the {o.colour} {o.shape}"), answer, index)


def unique_referents(scene: Scene) -> list[int]:
    """Objects that "the <colour> <shape>" names uniquely in this scene."""
    keys = [(o.colour, o.shape) for o in scene.objects]
    return [i for i, k in enumerate(keys) if keys.count(k) == 1]


def vqa(scene: Scene, task: str, rng: np.random.Generator, spec: DemoSpec) -> Question | None:
    """One VQA question of this kind about the scene, or None when the scene has no object it can be asked of."""
    objs = scene.objects
    colours = [o.colour for o in objs]
    shapes = [o.shape for o in objs]
    cfg = spec.scene_config()
    if task == "colour":  # of an object whose shape is unique
        cands = [i for i, s in enumerate(shapes) if shapes.count(s) == 1]
        if not cands:
            return None
        i = int(rng.choice(cands))
        return Question("colour", f"What colour is the {shapes[i]} ?", [colours[i]], i)
    if task == "shape":  # of an object whose colour is unique
        cands = [i for i, c in enumerate(colours) if colours.count(c) == 1]
        if not cands:
            return None
        i = int(rng.choice(cands))
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
    raise ValueError(f"unknown visual task {task!r}; known: {', '.join(VISUAL_TASKS)}")


def questions(scene: Scene, rng: np.random.Generator, spec: DemoSpec, n: int, vqa_share: float) -> list[Question]:
    """n questions about one scene: grounding of distinct uniquely named objects, VQA with probability
    `vqa_share` each (falling back to grounding when a VQA kind does not apply)."""
    refs = [int(i) for i in rng.permutation(unique_referents(scene))]
    out: list[Question] = []
    for _ in range(n):
        q = None
        if rng.random() < vqa_share:
            q = vqa(scene, str(rng.choice(VISUAL_TASKS[1:])), rng, spec)
        if q is None and refs:
            q = ground(scene, refs.pop(), spec)
        if q is None:
            q = ground(scene, scene.target, spec)
        out.append(q)
    return out
