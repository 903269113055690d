"""One input path for the demo model (issue 33): what the trainer feeds the model for a scene is what `vrh_qwen25`
(lmms-eval's chat backend, the path `vrh-lmms demo` evaluates through) hands the processor for the same scene, bit for
bit: the same image array, the same rendered prompt, and the same processor outputs. Before issue 33 the trainer
re-encoded images as JPEG quality 85 (the simple backend's path), which this test fails on."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from vrh_lmms.base.paths import assets_path
from vrh_lmms.pipelines.demo.stages import EVAL_START, TASK, demo_model_args
from vrh_lmms.pipelines.demo.stages import synth_config as _synth_config

MODEL = assets_path() / "demo_model"
pytestmark = pytest.mark.skipif(not (MODEL / "config.json").is_file(), reason="no shipped demo model")


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """Every processor call of the real backend on three of the demo's evaluation scenes: its inputs and outputs."""
    from vrh_lmms.base.synth.demo_spec import DemoSpec
    from vrh_lmms.harness import lmms

    spec = DemoSpec.load(MODEL)
    mp = pytest.MonkeyPatch()
    mp.setenv("VRH_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    mp.setenv("VRH_SYNTH_CONFIG", _synth_config(spec, 3, EVAL_START))
    lm = lmms.build_model("vrh_qwen25", demo_model_args(MODEL, spec))
    calls = []
    processor_cls = type(lm.processor)
    original = processor_cls.__call__

    def recording(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        calls.append({"text": kwargs["text"], "images": kwargs["images"], "out": out})
        return out

    mp.setattr(processor_cls, "__call__", recording)
    lmms.evaluate(lm, [TASK], lmms.task_manager("vrh_qwen25", tasks=[TASK]), gen_kwargs="max_new_tokens=2")
    mp.undo()
    assert calls, "the backend must call its processor"
    return lm, spec, calls


def _scene_of(spec, text: str):
    from vrh_lmms.base.synth.demo_spec import EVAL_SCENE_SEED
    from vrh_lmms.base.synth.scenes import generate_scene

    scenes = [generate_scene(EVAL_START + i, EVAL_SCENE_SEED, spec.scene_config()) for i in range(3)]
    (scene,) = [s for s in scenes if f" {s.expression}" in text or f"\n{s.expression}" in text]
    return scene


def test_the_trainer_feeds_what_the_evaluation_backend_feeds(captured):
    from research.demo_model.data import FastEncoder, backend_inputs, decoded_image

    lm, spec, calls = captured
    processor = lm.processor
    assert len(calls) == 3 and json.loads(_synth_config(spec, 3, EVAL_START))["n"] == 3
    for call in calls:
        (text,), (image,) = call["text"], call["images"]
        scene = _scene_of(spec, text)
        # the processor's inputs: the image array and the rendered prompt, bit for bit
        assert np.array_equal(np.asarray(image), decoded_image(scene, spec))
        ours = backend_inputs(processor, [scene], spec)
        for key in ("input_ids", "attention_mask", "pixel_values", "image_grid_thw", "mm_token_type_ids"):
            assert torch.equal(ours[key], call["out"][key]), key
        fast = FastEncoder(processor, spec, scene).batch([scene])  # the training fast path
        assert torch.equal(fast["input_ids"], call["out"]["input_ids"])
        assert float((fast["pixel_values"] - call["out"]["pixel_values"]).abs().max()) <= 1e-5
