"""The Qwen2.5-Omni family on its tiny real-class checkpoint, through lmms-eval's own `qwen2_5_omni` backend.

The tiny checkpoint is Qwen2_5OmniForConditionalGeneration (thinker only). The shared tiny-family tests run on its
thinker (image inputs; vrh_lmms.model.tiny.inputs.load_tiny); here: the saved files and the talker-free weights, audio
token ids inside the vocabulary, generation through `vrh_qwen25_omni` on audio, the wrapper's generate equal to the
thinker's, ablated logits (through the full model, on audio) equal to an independent reference, a head that writes
nothing changes nothing, and a failing generate is an error, not an empty answer (lmms-eval's plain backend cannot
be compared: it loads the hub processor and cannot answer with transformers 5, docs/models.md).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from oracles.reference_ablation import reference_ablation
from safetensors.torch import load_file
from support.wrappers import model_inputs, recorded_generate

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import HeadRef
from vrh_lmms.base.heads.geometry import Geometry
from vrh_lmms.cli import main
from vrh_lmms.model.backbone import locate_decoder
from vrh_lmms.model.tiny.registry import build_tiny

torch.set_num_threads(1)
FAMILY = "qwen2_5_omni"
TASK, SPLIT = "vrh_test_audio", "test"


def clip(seed: int, seconds: float = 1.3) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(int(16000 * seconds)) * 0.1).astype(np.float32)


def audio_requests(docs: dict[int, dict]) -> list:
    from lmms_eval.api.instance import Instance

    out = []
    for doc_id, doc in docs.items():
        gen = {"max_new_tokens": 4, "temperature": 0, "until": ["<|never|>"]}
        args = (doc["q"], gen, lambda d: [{"array": d["audio"], "sampling_rate": 16000}], doc_id, TASK, SPLIT)
        out.append(Instance(request_type="generate_until", arguments=args, idx=0,
                            metadata={"task": TASK, "doc_id": doc_id, "repeats": 1}))
    return out


def run_audio(lm, docs: dict[int, dict]) -> list[str]:
    lm.task_dict = {TASK: {SPLIT: docs}}
    return lm.generate_until(audio_requests(docs))


def docs(n: int = 2) -> dict[int, dict]:
    return {i: {"audio": clip(i, 1.3 + 0.7 * i), "q": "how many tones are in the audio clip ?"} for i in range(n)}


def wrapper(ckpt, **kwargs):
    from vrh_lmms.model_wrappers.qwen2_5_omni import VRHQwen25Omni

    return VRHQwen25Omni(pretrained=str(ckpt), dtype="float32", **kwargs)


def test_cli_round_trip_and_seeds(tiny_checkpoints, tmp_path):
    out = tmp_path / "ckpt"
    assert main(["make-tiny", FAMILY, str(out), "--seed", "0"]) == 0
    for name in ("config.json", "model.safetensors", "tokenizer.json", "spk_dict.pt"):
        assert (out / name).is_file(), name
    reference = Path(tiny_checkpoints(FAMILY))
    assert (out / "model.safetensors").read_bytes() == (reference / "model.safetensors").read_bytes()
    other = load_file(str(build_tiny(FAMILY, tmp_path / "seed1", seed=1) / "model.safetensors"))
    mine = load_file(str(reference / "model.safetensors"))
    assert mine.keys() == other.keys() and any(not torch.equal(mine[k], other[k]) for k in mine)
    assert not any(k.startswith(("talker.", "token2wav.")) for k in mine)  # thinker only
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["Qwen2_5OmniForConditionalGeneration"]


def test_token_ids_inside_vocabulary_and_geometry(tiny_checkpoints):
    from transformers import AutoProcessor, Qwen2_5OmniForConditionalGeneration

    ckpt = tiny_checkpoints(FAMILY)
    model = Qwen2_5OmniForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float32)
    processor = AutoProcessor.from_pretrained(ckpt)
    tok = processor.tokenizer
    thinker = model.config.thinker_config
    for attr, token in (("audio_token_index", "<|AUDIO|>"), ("image_token_index", "<|IMAGE|>"),
                        ("video_token_index", "<|VIDEO|>"), ("audio_start_token_id", "<|audio_bos|>"),
                        ("audio_end_token_id", "<|audio_eos|>")):
        assert getattr(thinker, attr) == tok.convert_tokens_to_ids(token) != tok.unk_token_id, attr
    assert processor.audio_token_id == thinker.audio_token_index
    decoder = locate_decoder(model)
    assert decoder.geometry == Geometry(layers=2, heads=4, kv_heads=2, head_dim=16)
    assert decoder.layers_path == "thinker.model.language_model.layers"
    assert decoder.text_config is thinker.text_config


@pytest.fixture(scope="module")
def omni(tiny_checkpoints):
    return wrapper(tiny_checkpoints(FAMILY), heads="none")


def test_loads_through_the_lmms_eval_backend_and_generates_on_audio(omni, tiny_checkpoints):
    import lmms_eval.models as lm_models
    from lmms_eval.models.simple.qwen2_5_omni import Qwen2_5_Omni

    cls = lm_models.get_model("vrh_qwen25_omni")
    assert issubclass(cls, Qwen2_5_Omni) and cls.vrh_family == FAMILY
    lm = cls.create_from_arg_string(f"pretrained={tiny_checkpoints(FAMILY)}", {"batch_size": 1})
    assert type(lm.model).__name__ == "Qwen2_5OmniForConditionalGeneration" and not lm.model.has_talker
    outs = run_audio(lm, docs())
    assert len(outs) == 2 and all(o.strip() for o in outs)
    assert outs == run_audio(omni, docs())
    assert lm.vrh_record()["family"] == FAMILY and lm.vrh_record()["ablation"]["mode"] == "none"


def test_generate_is_the_thinkers_own(omni):
    """heads=none: the answer ids equal the thinker's greedy generate on the inputs the backend built."""
    with recorded_generate(omni.model) as calls:
        run_audio(omni, docs(1))
    (call,) = calls
    inputs = model_inputs(call)
    assert inputs["input_features"].shape[1] == 128 and "feature_attention_mask" in inputs
    got = omni.model.generate(**inputs, max_new_tokens=4, do_sample=False)
    with torch.no_grad():
        expect = omni.model.thinker.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert torch.equal(got, expect) and got.shape[1] > inputs["input_ids"].shape[1]


def test_ablated_logits_equal_reference_and_change(tiny_checkpoints):
    lm = wrapper(tiny_checkpoints(FAMILY), heads="L0H1;L1H0", ablation="zero")
    record = lm.vrh_record()
    assert record["ablation"]["heads"] == ["L0H1", "L1H0"] and record["ablation"]["method"] == "fold"
    with recorded_generate(lm.model) as calls:
        ablated_text = run_audio(lm, docs(1))
    inputs = model_inputs(calls[0])
    model = lm.model
    with torch.no_grad():
        got = model(**inputs).logits
        lm.vrh_ablator.restore()
        clean = model(**inputs).logits
        clean_text = run_audio(lm, docs(1))
        with reference_ablation(model.thinker, [HeadRef(0, 1), HeadRef(1, 0)]):
            ref = model(**inputs).logits
    assert not torch.allclose(clean, ref)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
    assert ablated_text != clean_text  # the ablation reaches the answers


def test_a_head_that_writes_nothing_changes_nothing(tiny_checkpoints, tmp_path):
    from transformers import Qwen2_5OmniForConditionalGeneration

    path = tmp_path / "pruned"
    shutil.copytree(tiny_checkpoints(FAMILY), path)
    model = Qwen2_5OmniForConditionalGeneration.from_pretrained(str(path), dtype=torch.float32)
    dec = locate_decoder(model)
    with torch.no_grad():
        dec.out_projs[0].weight[:, 2 * 16:3 * 16] = 0
    model.save_pretrained(str(path))
    base = wrapper(path, heads="none")
    assert [str(h) for h in base.vrh_dead_heads] == ["L0H2"]
    expected = run_audio(base, docs())
    assert all(text.strip() for text in expected)
    del base
    dead = wrapper(path, heads="L0H2")
    assert dead.vrh_record()["ablation"]["dead_heads"] == ["L0H2"]
    assert run_audio(dead, docs()) == expected


def test_a_failing_generate_is_an_error_not_an_empty_answer(omni, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(omni.model.thinker, "generate", broken)
    with pytest.raises(VRHError, match="generate failed on 1 of 1 requests: RuntimeError: boom"):
        run_audio(omni, docs(1))


def test_without_the_omni_extra_the_wrapper_fails_with_one_clear_message(monkeypatch):
    import importlib
    import sys

    import vrh_lmms.model_wrappers.qwen2_5_omni as wrapper_module

    monkeypatch.setitem(sys.modules, "lmms_eval.models.simple.qwen2_5_omni", None)  # as if librosa were missing
    try:
        reloaded = importlib.reload(wrapper_module)
        assert reloaded.MISSING == "lmms_eval.models.simple.qwen2_5_omni"
        with pytest.raises(VRHError, match=r"pip install 'vrh-lmms\[omni\]'"):
            reloaded.VRHQwen25Omni(pretrained="/nonexistent")
    finally:
        monkeypatch.undo()
        importlib.reload(wrapper_module)


def test_audio_sources_follow_the_prompts_content_order():
    """With use_audio_in_video, qwen_omni_utils collects audio slots in content order: standalone clips and each
    video's track; the processor must be told which slot is which video's."""
    from vrh_lmms.model_wrappers.qwen2_5_omni import audio_sources

    text = "a <|AUDIO|> b <|VIDEO|> c <|AUDIO|><|VIDEO|>"
    assert audio_sources(text, "<|AUDIO|>", "<|VIDEO|>") == [None, 0, None, 1]
    assert audio_sources(["<|VIDEO|>", "<|AUDIO|>"], "<|AUDIO|>", "<|VIDEO|>") == [0, None]
