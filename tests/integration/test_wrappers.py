"""vrh_* wrappers of lmms-eval backends, on tiny real-class checkpoints (CPU).

- heads=none: the wrapper answers exactly as the lmms-eval backend it subclasses;
- with heads: the logits of the model the wrapper runs, on the exact inputs it passed to `model.generate`, equal an
  independent reference ablation (attention-output space), and `vrh_record()` names heads, mode and seed;
- batch size 2 with left padding gives each sample the same answer and next-token logits as batch size 1.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from lmms_eval.models.simple.llava_hf import VICUNA_CHAT_TEMPLATE
from oracles.reference_ablation import reference_ablation
from support.wrappers import (
    assert_batch_two_equals_one,
    last_logits_by_prompt,
    model_inputs,
    recorded_generate,
    run,
    scene_docs,
)

from vrh_lmms.base.heads import HeadRef

torch.set_num_threads(1)

QWEN_PIXELS = {"min_pixels": 28 * 28 * 4, "max_pixels": 28 * 28 * 64}
HEADS = "L0H1;L1H0"


def _cls(path: str):
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


@dataclass
class Case:
    model_id: str
    family: str
    wrapper: str  # module:class
    base: str  # the lmms-eval class it subclasses
    kwargs: dict[str, Any] = field(default_factory=dict)
    batches: bool = False  # the backend supports batch_size > 1
    reference: str | None = None  # attention kernel under the reference: None = what the text stack runs

    def __str__(self) -> str:
        return f"{self.model_id}:{self.wrapper.rsplit(':')[-1]}"


W = "vrh_lmms.model_wrappers"
S, C = "lmms_eval.models.simple", "lmms_eval.models.chat"
CASES = [
    Case("vrh_qwen25", "qwen2_5_vl", f"{W}.qwen2_5_vl:VRHQwen25", f"{S}.qwen2_5_vl:Qwen2_5_VL", QWEN_PIXELS, True),
    Case("vrh_qwen25", "qwen2_5_vl", f"{W}.qwen2_5_vl:VRHQwen25Chat", f"{C}.qwen2_5_vl:Qwen2_5_VL", QWEN_PIXELS,
         True),
    Case("vrh_qwen3", "qwen3_vl", f"{W}.qwen3_vl:VRHQwen3", f"{S}.qwen3_vl:Qwen3_VL", QWEN_PIXELS, True),
    Case("vrh_qwen3", "qwen3_vl", f"{W}.qwen3_vl:VRHQwen3Chat", f"{C}.qwen3_vl:Qwen3_VL", QWEN_PIXELS, True),
    Case("vrh_internvl", "internvl", f"{W}.internvl_hf:VRHInternVLChat", f"{C}.internvl_hf:InternVLHf"),
    # lmms-eval's simple llava_hf sends string message content, which LLaVA-NeXT's list-only chat templates drop
    # (the prompt loses text and <image>); the Vicuna template it ships for templateless checkpoints handles it.
    Case("vrh_llava_next", "llava_next", f"{W}.llava_next:VRHLlavaNext", f"{S}.llava_hf:LlavaHf",
         {"chat_template": VICUNA_CHAT_TEMPLATE}),
    Case("vrh_llava_next", "llava_next", f"{W}.llava_next:VRHLlavaNextChat", f"{C}.llava_hf:LlavaHf"),
    Case("vrh_glm4v", "glm4v", f"{W}.glm4v:VRHGLM4V", f"{S}.glm4v:GLM4V", batches=True),
]

def _base_path(case: Case, ckpt, tmp_path_factory) -> str:
    """lmms-eval's glm4v picks the MoE class unless "Flash" is in the name: give the base backend such a name."""
    if case.family != "glm4v":
        return str(ckpt)
    link = tmp_path_factory.mktemp("glm") / "GLM-4.1V-Flash-tiny"
    if not link.exists():
        link.symlink_to(ckpt, target_is_directory=True)
    return str(link)


@pytest.fixture(params=CASES, ids=str)
def case(request):
    return request.param


def test_wrapper_class_is_registered_and_typed(case):
    from vrh_lmms.model_wrappers.manifests import WRAPPERS

    cls, base = _cls(case.wrapper), _cls(case.base)
    module, simple, chat = WRAPPERS[case.model_id]
    assert cls.__name__ in (simple, chat) and cls.__module__.endswith(module)
    assert issubclass(cls, base) and cls.is_simple == base.is_simple
    assert cls.vrh_family == case.family


def test_heads_none_answers_like_the_base_backend(case, tiny_or_skip, tmp_path_factory):
    ckpt = tiny_or_skip(case.family)
    docs = scene_docs(3)
    base = _cls(case.base)(pretrained=_base_path(case, ckpt, tmp_path_factory), device="cpu", device_map="cpu",
                           **case.kwargs)
    expected = run(base, docs)
    del base
    wrapper = _cls(case.wrapper)(pretrained=str(ckpt), heads="none", **case.kwargs)
    assert wrapper.vrh_record()["ablation"]["mode"] == "none" and wrapper.vrh_ablator.method is None
    assert run(wrapper, docs) == expected
    assert any(text.strip() for text in expected)


def test_ablated_logits_equal_reference_and_record(case, tiny_or_skip):
    ckpt = tiny_or_skip(case.family)
    wrapper = _cls(case.wrapper)(pretrained=str(ckpt), heads=HEADS, ablation="zero", seed=3, dtype="float32",
                                 **case.kwargs)
    model = wrapper.model
    assert model.dtype == torch.float32
    record = wrapper.vrh_record()
    assert record["family"] == case.family and record["pretrained"] == str(ckpt)
    assert record["ablation"]["heads"] == ["L0H1", "L1H0"] and record["ablation"]["mode"] == "zero"
    assert record["ablation"]["method"] == "fold" and record["ablation"]["spec"] == HEADS
    assert record["config"]["kind"] == "explicit" and record["config"]["k"] == 2
    assert record["geometry"] == wrapper.vrh_decoder.geometry.to_dict()
    with recorded_generate(model) as calls:
        run(wrapper, scene_docs(2), max_new_tokens=2)
    assert calls, "the backend must answer through self.model.generate"
    inputs = model_inputs(calls[0])
    with torch.no_grad():
        got = model(**inputs).logits
        wrapper.vrh_ablator.restore()
        clean = model(**inputs).logits
        with reference_ablation(model, [HeadRef(0, 1), HeadRef(1, 0)], base=case.reference):
            ref = model(**inputs).logits
    assert not torch.allclose(clean, ref)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)


def test_batch_of_two_left_padded_equals_batch_of_one(case, tiny_or_skip):
    if not case.batches:
        pytest.skip(f"{case}: the lmms-eval backend runs batch size 1 only (it asserts it)")
    ckpt = tiny_or_skip(case.family)
    assert_batch_two_equals_one(lambda bs: _cls(case.wrapper)(pretrained=str(ckpt), heads=HEADS, dtype="float32",
                                                               batch_size=bs, **case.kwargs), scene_docs(3))


# ------------------------------------------------------------------------------------------- our own backends
def test_paligemma_heads_none_equals_plain_transformers(tiny_or_skip):
    """vrh_paligemma has no lmms-eval base: compare with PaliGemma run by hand (prompt `<image>` + text)."""
    from transformers import PaliGemmaForConditionalGeneration, PaliGemmaProcessor

    from vrh_lmms.model_wrappers.paligemma import VRHPaliGemma

    ckpt = tiny_or_skip("paligemma")
    docs = scene_docs(3)
    model = PaliGemmaForConditionalGeneration.from_pretrained(ckpt, dtype=torch.bfloat16).eval()
    processor = PaliGemmaProcessor.from_pretrained(ckpt)
    expected = []
    for doc in docs.values():
        inputs = processor(text=f"<image>Locate {doc['expression']} in the image.", images=doc["image"],
                           return_tensors="pt")
        inputs["pixel_values"] = inputs["pixel_values"].to(torch.bfloat16)
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=6, do_sample=False)
        expected.append(processor.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))
    wrapper = VRHPaliGemma(pretrained=str(ckpt), heads="none")
    assert run(wrapper, docs) == expected


@pytest.mark.parametrize("bs", [1, 2])
def test_paligemma_ablated_logits_equal_reference(tiny_or_skip, bs):
    from vrh_lmms.model_wrappers.paligemma import VRHPaliGemma

    ckpt = tiny_or_skip("paligemma")
    wrapper = VRHPaliGemma(pretrained=str(ckpt), heads=HEADS, dtype="float32", batch_size=bs)
    with recorded_generate(wrapper.model) as calls:
        run(wrapper, scene_docs(2), max_new_tokens=2)
    inputs = model_inputs(calls[0])
    assert inputs["input_ids"].shape[0] == bs
    model = wrapper.model
    with torch.no_grad():
        got = model(**inputs).logits
        wrapper.vrh_ablator.restore()
        with reference_ablation(model, [HeadRef(0, 1), HeadRef(1, 0)], base="eager"):
            ref = model(**inputs).logits
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)


def test_paligemma_batch_of_two_equals_batch_of_one(tiny_or_skip):
    from vrh_lmms.model_wrappers.paligemma import VRHPaliGemma

    ckpt = tiny_or_skip("paligemma")
    docs = scene_docs(3)
    texts, logits = {}, {}
    for bs in (1, 2):
        wrapper = VRHPaliGemma(pretrained=str(ckpt), heads=HEADS, dtype="float32", batch_size=bs)
        with recorded_generate(wrapper.model) as calls:
            texts[bs] = run(wrapper, docs)
        logits[bs] = last_logits_by_prompt(wrapper.model, calls)
    assert texts[2] == texts[1]
    for key in logits[1]:
        torch.testing.assert_close(logits[2][key], logits[1][key], rtol=1e-4, atol=1e-4)


def test_own_backend_generation_kwargs():
    from vrh_lmms.base.errors import VRHError
    from vrh_lmms.model_wrappers.own_backend import cut_at_until, split_gen_kwargs

    until, gen = split_gen_kwargs({"until": "</s>", "max_new_tokens": 9, "top_p": 0.5, "image_sizes": [1]}, 64)
    assert until == ["</s>"] and gen == {"max_new_tokens": 9, "num_beams": 1, "do_sample": False}
    until, gen = split_gen_kwargs({"temperature": 0.7}, 64)
    assert until == [] and gen == {"max_new_tokens": 64, "num_beams": 1, "do_sample": True, "temperature": 0.7}
    assert cut_at_until("a box\n\nmore", ["\n\n"]) == "a box"
    with pytest.raises(VRHError, match="until"):
        split_gen_kwargs({"until": 3}, 8)


# --------------------------------------------------------------------------------------------- wiring details
def test_manifests_load_without_optional_packages():
    from lmms_eval.models.registry_v2 import ModelRegistryV2

    from vrh_lmms.model_wrappers.manifests import WRAPPERS, manifests

    registry = ModelRegistryV2()
    for m in manifests():
        registry.register_manifest(m)
    expected = {"vrh_qwen25", "vrh_qwen3", "vrh_internvl", "vrh_internvl3", "vrh_internvl3_5", "vrh_internvl2",
                "vrh_llava_next", "vrh_glm4v", "vrh_phi4", "vrh_paligemma", "vrh_magma", "vrh_deepseek_vl2"}
    assert expected <= set(WRAPPERS)
    for model_id in expected:
        cls = registry.get_model_class(model_id)  # imports the module, checks is_simple against the manifest
        assert cls.vrh_family
        if WRAPPERS[model_id][1]:
            assert registry.get_model_class(model_id, force_simple=True).is_simple


def test_every_wrapper_family_is_in_the_family_table():
    from vrh_lmms.base.families import FAMILIES
    from vrh_lmms.model_wrappers.manifests import WRAPPERS

    for module, simple, chat in WRAPPERS.values():
        for name in (simple, chat):
            if name:
                assert _cls(f"{W}.{module}:{name}").vrh_family in FAMILIES


def test_phi4_without_librosa_fails_with_one_clear_message():
    from vrh_lmms.base.errors import VRHError
    from vrh_lmms.model_wrappers import phi4

    if phi4.MISSING is None:
        pytest.skip("librosa is installed here: vrh_phi4 is usable")
    with pytest.raises(VRHError, match=r"vrh_phi4 needs the Python package 'librosa'.*pip install 'vrh-lmms\[phi4\]'"):
        phi4.VRHPhi4(pretrained="microsoft/Phi-4-multimodal-instruct", heads="none")
    with pytest.raises(VRHError, match="librosa"):
        phi4.VRHPhi4Chat(pretrained="microsoft/Phi-4-multimodal-instruct")


def test_glm4v_wrapper_loads_the_dense_class_whatever_the_name(tiny_or_skip):
    import lmms_eval.models.simple.glm4v as glm_module
    from transformers import Glm4vForConditionalGeneration

    from vrh_lmms.model_wrappers.glm4v import VRHGLM4V

    ckpt = tiny_or_skip("glm4v")
    assert "Flash" not in str(ckpt)  # lmms-eval's own choice would be the MoE class here
    before = glm_module.Glm4vMoeForConditionalGeneration
    wrapper = VRHGLM4V(pretrained=str(ckpt), heads="L0H0")
    assert type(wrapper.model) is Glm4vForConditionalGeneration
    assert glm_module.Glm4vMoeForConditionalGeneration is before  # the module is left as it was


def test_llava_empty_device_map_becomes_the_device(tiny_or_skip):
    """llava_hf's default device_map "" is refused by transformers 5; the wrapper turns it into the device."""
    from vrh_lmms.model_wrappers.llava_next import VRHLlavaNextChat

    ckpt = tiny_or_skip("llava_next")
    wrapper = VRHLlavaNextChat(pretrained=str(ckpt), heads="none")
    assert wrapper.device_map == str(wrapper.device) and wrapper.model.device == wrapper.device


def test_unknown_model_arg_of_own_backend_is_named(tiny_or_skip):
    from vrh_lmms.base.errors import VRHError
    from vrh_lmms.model_wrappers.paligemma import VRHPaliGemma

    ckpt = tiny_or_skip("paligemma")
    with pytest.raises(VRHError, match="model arg max_pixelz=3 is not one that vrh_paligemma takes"):
        VRHPaliGemma(pretrained=str(ckpt), max_pixelz=3)


# ----------------------------------------------------------------------------------- data-parallel (accelerate)
def test_ablation_reaches_a_ddp_wrapped_model(tiny_checkpoints, gloo_group):
    """Under `accelerate launch` lmms-eval backends keep `_model` wrapped and unwrap it in `self.model`; the mixin
    applies ablation through `self.model`, so the weights the wrapped model runs are the edited ones.

    (accelerate's prepare_model(evaluation_mode=True), which lmms-eval uses for DDP, leaves the model unwrapped on
    cuda:<rank>; FSDP wraps it. A DDP wrapper of a gloo group of one process is the honest CPU stand-in.)"""
    from lmms_eval.models.simple.qwen2_5_vl import Qwen2_5_VL
    from torch.nn.parallel import DistributedDataParallel

    from vrh_lmms.model_wrappers.base import VRHMixin

    class DDPQwen(Qwen2_5_VL):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._model = DistributedDataParallel(self._model)  # what accelerator.prepare does with a wrapper

    class VRHDDPQwen(VRHMixin, DDPQwen):
        vrh_family = "qwen2_5_vl"

    ckpt = tiny_checkpoints("qwen2_5_vl")
    wrapper = VRHDDPQwen(pretrained=str(ckpt), heads=HEADS, dtype="float32", **QWEN_PIXELS)
    assert isinstance(wrapper._model, DistributedDataParallel) and wrapper.model is wrapper._model.module
    with recorded_generate(wrapper.model) as calls:
        run(wrapper, scene_docs(1), max_new_tokens=2)
    inputs = model_inputs(calls[0])
    with torch.no_grad():
        got = wrapper._model(**inputs).logits  # forward through the DDP wrapper
        wrapper.vrh_ablator.restore()
        with reference_ablation(wrapper.model, [HeadRef(0, 1), HeadRef(1, 0)]):
            ref = wrapper._model(**inputs).logits
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)


def test_fsdp_under_accelerate_chooses_the_hook(monkeypatch):
    """With FSDP (flattened parameters) the mixin must not fold weights in place: `auto` becomes `hook`."""
    from accelerate import DistributedType

    from vrh_lmms.model_wrappers.base import VRHMixin

    class FakeAccelerator:
        num_processes = 2
        distributed_type = DistributedType.FSDP

    holder = VRHMixin.__new__(VRHMixin)
    holder.accelerator = FakeAccelerator()
    assert holder._ablation_method("auto") == "hook"
    assert holder._ablation_method("fold") == "fold"
    FakeAccelerator.distributed_type = DistributedType.MULTI_GPU
    assert holder._ablation_method("auto") == "auto"


def test_cpu_fallback_maps_cuda_only_without_cuda(monkeypatch):
    from vrh_lmms.model_wrappers import cpu_fallback

    class Holder(cpu_fallback.CudaToCpuFallback):
        pass

    h = Holder()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    h._device, h.device_map = torch.device("cuda:1"), "cuda:1"
    assert h._device == torch.device("cpu") and h.device_map == "cpu"
    h.device_map = {"language_model": 0}
    assert h.device_map == {"language_model": 0}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    h._device, h.device_map = "cuda:1", "cuda:1"
    assert h._device == torch.device("cuda:1") and h.device_map == "cuda:1"
