"""`vrh_synth_vqa`: the demo's VQA questions as an lmms-eval task (the cross-task test on the demo model).

Answers are checked against the scene's objects independently of the question builder; scoring through lmms-eval
with a scripted model that answers right on some docs and wrong on others."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from vrh_lmms.base.synth.questions import VQA_KINDS, evaluation_question
from vrh_lmms.base.synth.scenes import SceneConfig, generate_scenes


def _truth(scene, prompt: str) -> str:
    """The answer read off the scene's objects from the question's words (not from the builder's answer)."""
    words = prompt.rstrip(" ?").split()
    objs = scene.objects
    if prompt.startswith("What colour is the "):
        return next(o.colour for o in objs if o.shape == words[-1])
    if prompt.startswith("What shape is the "):
        return next(o.shape for o in objs if o.colour == words[-2])
    if prompt.startswith("How many "):
        word = words[2]
        return str(sum(word in (o.colour, o.shape) for o in objs))
    if prompt.startswith("Is there a "):
        return "yes" if any((o.colour, o.shape) == (words[3], words[4]) for o in objs) else "no"
    raise AssertionError(prompt)


def test_questions_are_answered_by_the_scene_and_cover_every_kind():
    cfg = SceneConfig(image_size=168, min_objects=3, max_objects=6)
    scenes = generate_scenes(60, seed=2, cfg=cfg, start=100_000)
    questions = [evaluation_question(s, 2, cfg) for s in scenes]
    assert [_truth(s, q.prompt) for s, q in zip(scenes, questions)] == [q.answer[0] for q in questions]
    kinds = Counter(q.task for q in questions)
    assert set(kinds) == set(VQA_KINDS) and min(kinds.values()) >= 8
    # a scene's question depends on its id and the seed only, not on which other scenes are asked
    again = evaluation_question(generate_scenes(1, seed=2, cfg=cfg, start=100_007)[0], 2, cfg)
    assert again == questions[7]


def test_task_scores_replies_through_lmms_eval(vrh_env, monkeypatch):
    from lmms_eval.evaluator import simple_evaluate
    from lmms_eval.tasks import TaskManager
    from test_tasks_lmms_eval import _Scripted

    from vrh_lmms.base.paths import tasks_path

    monkeypatch.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 12, "seed": 2, "start": 100_000,
                                                       "scene": {"image_size": 168}}))

    def reply(doc_id, doc):  # right on even docs, a wrong answer of the right type on odd ones
        target = doc["vrh_target"]
        if doc_id % 2 == 0:
            return target
        kind = doc["vrh_answer_type"]
        if kind == "number":
            return str(int(target) + 1)
        return ("no" if target == "yes" else "yes") if kind == "yes_no" else "nothing"

    manager = TaskManager(include_path=str(tasks_path()), model_name="qwen2_5_vl")
    out = simple_evaluate(model=_Scripted.make(reply), tasks=["vrh_synth_vqa"], task_manager=manager,
                          log_samples=True)
    res = out["results"]["vrh_synth_vqa"]
    assert res["acc,none"] == pytest.approx(0.5)
    samples = out["samples"]["vrh_synth_vqa"]
    assert len(samples) == 12
    assert {s["vrh_record"]["image_id"] for s in samples} == {str(100_000 + i) for i in range(12)}
