"""Questions about one synthetic scene: grounding (the demo's task) and short VQA on the same image.

Several visual tasks on the same scenes give heads jobs other than fetching a box (naming a colour, a shape,
counting, checking existence), as a real VLM's instruction data does; only grounding is evaluated by the demo.
Each question names its answer tokens; the stop token is added by the encoder.
"""

from __future__ import annotations

import numpy as np

from vrh_lmms.base.synth.demo_spec import DemoSpec, prompt_for
from vrh_lmms.base.synth.questions import VQA_KINDS, Question, vqa_question
from vrh_lmms.base.synth.scenes import Scene

VISUAL_TASKS: tuple[str, ...] = ("ground", *VQA_KINDS)


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
    """One VQA question of this kind about the scene (vrh_lmms.base.synth.questions, shared with `vrh_synth_vqa`)."""
    return vqa_question(scene, task, rng, spec.scene_config())


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
