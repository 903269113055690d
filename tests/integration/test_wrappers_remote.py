"""Backends of remote-code models (vrh_internvl3/3_5/2, vrh_magma, vrh_deepseek_vl2), wired to stand-in models.

No remote-code checkpoint can be fetched here, so each loader is pointed at a small model with the real layout
(the language model is a real tiny transformers Qwen2 / Llama, under the family's attribute path) and the real
calling convention (InternVL's `chat` -> `self.generate`; Magma and DeepSeek-VL2 `generate(input_ids=..., ...)`
returning prompt + answer). What this checks: the wrapper builds on the CPU, finds the decoder, ablates the model
the backend runs, answers through `model.generate` with the inputs it built, and answers like the unwrapped backend
with heads=none. What it cannot check: the real remote code, processors and checkpoints.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import torch
from oracles.reference_ablation import reference_ablation
from support.wrappers import model_inputs, recorded_generate, run, scene_docs
from torch import nn
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, PretrainedConfig, Qwen2Config, Qwen2ForCausalLM

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import HeadRef

torch.set_num_threads(1)
HEADS = [HeadRef(0, 1), HeadRef(1, 0)]


def _config(model_type: str, **fields) -> PretrainedConfig:
    return type(f"Config_{model_type}", (PretrainedConfig,), {"model_type": model_type})(**fields)


class StandInVLM(nn.Module):
    """Vision conv + projector + a real tiny causal LM; image features are added to every prompt position."""

    lm_attr = "language_model"
    returns_prompt = True  # generate(input_ids=...) returns prompt + answer, as GenerationMixin does

    def __init__(self, config, lm: nn.Module):
        super().__init__()
        self.config = config
        self.vision = nn.Sequential(nn.Conv2d(3, 8, 16, 16), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.projector = nn.Linear(8, lm.config.hidden_size)
        setattr(self, self.lm_attr, lm)

    @property
    def lm(self) -> nn.Module:
        return getattr(self, self.lm_attr)

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def embeds(self, input_ids, pixels=None):
        emb = self.lm.get_input_embeddings()(input_ids)
        if pixels is not None:
            pixels = pixels.to(self.dtype).reshape(-1, 3, *pixels.shape[-2:])
            emb = emb + self.projector(self.vision(pixels)).mean(0)
        return emb

    def pixels_of(self, kwargs):
        return kwargs.get("pixel_values", kwargs.get("images"))

    def forward(self, input_ids, attention_mask=None, **kwargs):
        return self.lm(inputs_embeds=self.embeds(input_ids, self.pixels_of(kwargs)), attention_mask=attention_mask)

    def generate(self, input_ids, attention_mask=None, **kwargs):
        pixels = self.pixels_of(kwargs)
        gen = {k: kwargs[k] for k in ("max_new_tokens", "do_sample", "num_beams", "eos_token_id", "pad_token_id")
               if k in kwargs}
        new = self.lm.generate(inputs_embeds=self.embeds(input_ids, pixels), attention_mask=attention_mask, **gen)
        return torch.cat([input_ids, new], dim=1) if self.returns_prompt else new


def _qwen2(vocab: int) -> Qwen2ForCausalLM:
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)
    return Qwen2ForCausalLM(cfg).eval()


def _llama(vocab: int) -> LlamaForCausalLM:
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)
    return LlamaForCausalLM(cfg).eval()


def _dtype(kwargs) -> torch.dtype:
    return kwargs.get("dtype") or kwargs.get("torch_dtype") or torch.float32


def _check_ablation(wrapper, lm: nn.Module, inputs: dict) -> None:
    """The wrapper's model, on the inputs it generated from, equals a reference ablation of its language model."""
    model = wrapper.model
    with torch.no_grad():
        got = model(**inputs).logits.float()
        wrapper.vrh_ablator.restore()
        clean = model(**inputs).logits.float()
        with reference_ablation(lm, HEADS, text_key=""):
            ref = model(**inputs).logits.float()
    assert not torch.allclose(clean, ref, atol=1e-3)
    tol = 2e-2 if model.dtype == torch.bfloat16 else 1e-4
    torch.testing.assert_close(got, ref, rtol=tol, atol=tol)


# ------------------------------------------------------------------------------------------------ InternVL
class InternVLStandIn(StandInVLM):
    """InternVLChatModel's calling convention: chat() builds the prompt, then self.generate(pixel_values=...)."""

    returns_prompt = False  # InternVL generates from inputs_embeds: only the answer comes back

    def chat(self, tokenizer, pixel_values, question, generation_config, history=None, return_history=False,
             num_patches_list=None, **kwargs):
        if pixel_values is not None and "<image>" not in question:
            question = "<image>\n" + question
        query = tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                              add_generation_prompt=True)
        enc = tokenizer(query, return_tensors="pt")
        out = self.generate(pixel_values=pixel_values, input_ids=enc["input_ids"].to(self.device),
                            attention_mask=enc["attention_mask"].to(self.device), eos_token_id=tokenizer.eos_token_id,
                            **generation_config)
        response = tokenizer.batch_decode(out, skip_special_tokens=True)[0]
        return (response, history) if return_history else response


@pytest.fixture
def internvl_loader(monkeypatch, tiny_qwen25):
    """Point lmms-eval's remote-code InternVL backends at an InternVL-layout stand-in (Qwen2 text, InternVL3)."""
    import lmms_eval.models.simple.internvl2 as iv2
    import lmms_eval.models.simple.internvl3 as iv3

    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen25)
    made = []

    class FakeAutoModel:
        @staticmethod
        def from_pretrained(path, **kwargs):
            assert kwargs.get("trust_remote_code") is True
            torch.manual_seed(0)
            lm = _qwen2(len(tokenizer))
            config = _config("internvl_chat", llm_config=lm.config, vision_config=_config("intern_vit_6b"))
            model = InternVLStandIn(config, lm).to(_dtype(kwargs))
            made.append(model)
            return model

    class FakeAutoTokenizer:
        @staticmethod
        def from_pretrained(path, **kwargs):
            return tokenizer

    for module in (iv2, iv3):
        monkeypatch.setattr(module, "AutoModel", FakeAutoModel)
        monkeypatch.setattr(module, "AutoTokenizer", FakeAutoTokenizer)
    return made


@pytest.mark.parametrize("name", ["VRHInternVL3", "VRHInternVL3_5", "VRHInternVL2"])
def test_internvl_remote_wrappers(internvl_loader, name):
    import lmms_eval.models.simple.internvl2 as iv2
    import lmms_eval.models.simple.internvl3 as iv3

    from vrh_lmms.model_wrappers import internvl_remote
    from vrh_lmms.model_wrappers.cpu_fallback import CudaToCpuFallback

    cls = getattr(internvl_remote, name)
    base_cls = {"VRHInternVL3": iv3.InternVL3, "VRHInternVL3_5": internvl_remote._InternVL3_5,
                "VRHInternVL2": iv2.InternVL2}[name]
    docs = scene_docs(2)
    # the unwrapped backend hard-codes cuda:<rank>; with only the CPU fallback added it is otherwise untouched
    base = type("CPUBase", (CudaToCpuFallback, base_cls), {})(pretrained="OpenGVLab/stand-in")
    expected = run(base, docs)
    wrapper = cls(pretrained="OpenGVLab/stand-in", heads="none")
    assert wrapper.device == torch.device("cpu") and wrapper.config is wrapper.model.config
    assert run(wrapper, docs) == expected

    wrapper = cls(pretrained="OpenGVLab/stand-in", heads="L0H1;L1H0")
    assert wrapper.vrh_decoder.layers_path == "language_model.model.layers"
    assert wrapper.vrh_record()["family"] == "internvl_chat"
    with recorded_generate(wrapper.model) as calls:
        answers = run(wrapper, docs)
    assert len(calls) == 2 and "pixel_values" in calls[0] and answers != expected
    _check_ablation(wrapper, wrapper.model.language_model, model_inputs(calls[0]))


# -------------------------------------------------------------------------------------------------- Magma
class MagmaProcessorStandIn:
    """MagmaProcessor's interface: __call__(images=, texts=) -> input_ids, attention_mask, pixel_values,
    image_sizes (the backend adds the leading batch axis). image_sizes are (rows, cols) of crops, here one 64 px
    crop per image (the real crop arithmetic: tests/oracles/magma_standin.py)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __call__(self, images=None, texts=None, return_tensors="pt"):
        from transformers import BatchFeature

        enc = self.tokenizer(texts, return_tensors="pt")
        data = {**enc}
        if images:
            arrays = [np.asarray(i.resize((64, 64)), dtype=np.float32) / 255 for i in images]
            data["pixel_values"] = torch.stack([torch.from_numpy(a).permute(2, 0, 1) for a in arrays])
            data["image_sizes"] = torch.tensor([[1, 1] for _ in images])
        return BatchFeature(data)


@pytest.fixture
def magma_loader(monkeypatch, tiny_qwen25):
    import transformers

    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen25)
    seen = {}

    def model_from_pretrained(path, **kwargs):
        seen["model_kwargs"] = kwargs
        torch.manual_seed(0)
        lm = _llama(len(tokenizer))
        config = _config("magma", text_config=lm.config, mm_use_image_start_end=True)
        return StandInVLM(config, lm).to(_dtype(kwargs))

    def processor_from_pretrained(path, **kwargs):
        seen["processor_kwargs"] = kwargs
        return MagmaProcessorStandIn(tokenizer)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", model_from_pretrained)
    monkeypatch.setattr(transformers.AutoProcessor, "from_pretrained", processor_from_pretrained)
    return seen


def test_magma_backend(magma_loader):
    from vrh_lmms.model_wrappers.magma import SYSTEM_PROMPT, VRHMagma

    docs = scene_docs(2)
    wrapper = VRHMagma(pretrained="microsoft/Magma-8B", heads="none", dtype="float32")
    assert magma_loader["model_kwargs"]["trust_remote_code"] is True
    assert magma_loader["processor_kwargs"]["trust_remote_code"] is True
    with recorded_generate(wrapper.model) as calls:
        clean = run(wrapper, docs)
    call = calls[0]
    assert call["pixel_values"].shape[:2] == (1, 1) and call["image_sizes"].shape == (1, 1, 2)
    prompt = wrapper.prompt("Locate the red circle.", 1)
    assert SYSTEM_PROMPT in prompt and "<image_start><image><image_end>\nLocate the red circle." in prompt
    assert call["do_sample"] is False and call["num_beams"] == 1

    wrapper = VRHMagma(pretrained="microsoft/Magma-8B", heads="L0H1;L1H0", dtype="float32")
    assert wrapper.vrh_decoder.layers_path == "language_model.model.layers"
    with recorded_generate(wrapper.model) as calls:
        ablated_answers = run(wrapper, docs)
    assert ablated_answers != clean
    _check_ablation(wrapper, wrapper.model.language_model, model_inputs(calls[0]))
    with pytest.raises(VRHError, match="batch_size 2 is not supported"):
        VRHMagma(pretrained="microsoft/Magma-8B", batch_size=2)


# ------------------------------------------------------------------------------------------- DeepSeek-VL2
class DeepseekStandIn(StandInVLM):
    lm_attr = "language"


def _deepseek_package(tokenizer) -> types.ModuleType:
    """A `deepseek_vl2.models` stand-in: DeepseekVLV2Processor (process_one + batchify) and the model class."""
    from dataclasses import dataclass

    @dataclass
    class Sample:
        sft_format: str
        input_ids: torch.Tensor
        images: torch.Tensor

    class DeepseekVLV2Processor:
        def __init__(self):
            self.tokenizer = tokenizer

        @classmethod
        def from_pretrained(cls, path):
            return cls()

        def process_one(self, conversations, images, inference_mode=True, system_prompt=""):
            assert conversations[0]["role"] == "<|User|>" and conversations[-1] == {"role": "<|Assistant|>",
                                                                                      "content": ""}
            text = f"<|User|>: {conversations[0]['content']}\n\n<|Assistant|>:"
            ids = torch.tensor(tokenizer(text)["input_ids"])
            pix = torch.stack([torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(i.width + k))
                               for k, i in enumerate(images)])
            return Sample(text, ids, pix)

        def batchify(self, samples, padding="left"):
            assert padding == "left"
            pad = self.tokenizer.pad({"input_ids": [s.input_ids for s in samples]}, padding_side="left",
                                     return_tensors="pt")
            n = pad["input_ids"].shape[0]
            return {"sft_format": [s.sft_format for s in samples], "input_ids": pad["input_ids"],
                    "attention_mask": pad["attention_mask"].bool(), "labels": pad["input_ids"].clone(),
                    "images": torch.stack([s.images for s in samples]),
                    "images_seq_mask": torch.zeros_like(pad["input_ids"], dtype=torch.bool),
                    "images_spatial_crop": torch.ones(n, 1, 2, dtype=torch.long), "seq_lens": [1] * n}

    class DeepseekVLV2ForCausalLM:
        @staticmethod
        def from_pretrained(path, **kwargs):
            torch.manual_seed(0)
            lm = _llama(len(tokenizer))
            config = _config("deepseek_vl_v2", language_config=lm.config)
            return DeepseekStandIn(config, lm).to(_dtype(kwargs))

    package, models = types.ModuleType("deepseek_vl2"), types.ModuleType("deepseek_vl2.models")
    models.DeepseekVLV2Processor, models.DeepseekVLV2ForCausalLM = DeepseekVLV2Processor, DeepseekVLV2ForCausalLM
    package.models = models
    return package


@pytest.fixture
def deepseek_package(monkeypatch, tiny_qwen25):
    package = _deepseek_package(AutoTokenizer.from_pretrained(tiny_qwen25))
    monkeypatch.setitem(sys.modules, "deepseek_vl2", package)
    monkeypatch.setitem(sys.modules, "deepseek_vl2.models", package.models)
    return package


def test_deepseek_vl2_backend(deepseek_package):
    from vrh_lmms.model_wrappers.deepseek_vl2 import VRHDeepseekVL2

    docs = scene_docs(3)
    wrapper = VRHDeepseekVL2(pretrained="deepseek-ai/deepseek-vl2-tiny", heads="L0H1;L1H0", dtype="float32",
                             batch_size=2)
    assert wrapper.vrh_decoder.layers_path == "language.model.layers"
    with recorded_generate(wrapper.model) as calls:
        batched = run(wrapper, docs)
    assert set(calls[0]) >= {"input_ids", "attention_mask", "images", "images_seq_mask", "images_spatial_crop"}
    assert "sft_format" not in calls[0] and calls[0]["input_ids"].shape[0] == 2
    assert not calls[0]["attention_mask"][:, 0].all()  # left padded
    _check_ablation(wrapper, wrapper.model.language, model_inputs(calls[0]))
    single = VRHDeepseekVL2(pretrained="deepseek-ai/deepseek-vl2-tiny", heads="L0H1;L1H0", dtype="float32")
    assert run(single, docs) == batched


def test_deepseek_vl2_decode_keeps_grounding_tokens(deepseek_package):
    from vrh_lmms.model_wrappers.deepseek_vl2 import VRHDeepseekVL2

    wrapper = VRHDeepseekVL2(pretrained="deepseek-ai/deepseek-vl2-tiny")
    tok = wrapper.tokenizer
    ids = tok("<|object_ref_start|> red <|object_ref_end|>")["input_ids"] + [tok.eos_token_id, tok.pad_token_id]
    text = wrapper.decode(torch.tensor([ids]))[0]
    assert "<|object_ref_start|>" in text and tok.eos_token not in text and tok.pad_token not in text


def test_deepseek_vl2_missing_package_is_one_clear_error(monkeypatch):
    from vrh_lmms.model_wrappers.deepseek_vl2 import VRHDeepseekVL2, import_deepseek_vl2

    monkeypatch.setitem(sys.modules, "deepseek_vl2", None)  # makes `import deepseek_vl2` fail as if absent
    with pytest.raises(VRHError, match=r"needs the 'deepseek_vl2' package.*pip install git\+https://github.com/"
                                       r"deepseek-ai/DeepSeek-VL2"):
        import_deepseek_vl2()
    with pytest.raises(VRHError, match="deepseek_vl2"):
        VRHDeepseekVL2(pretrained="deepseek-ai/deepseek-vl2-tiny")


def test_deepseek_vl2_broken_package_names_the_cause(monkeypatch):
    from vrh_lmms.model_wrappers.deepseek_vl2 import import_deepseek_vl2

    broken = types.ModuleType("deepseek_vl2.models")

    def fail(name):
        raise ImportError("cannot import name 'LlamaFlashAttention2' from 'transformers.models.llama'")

    broken.__getattr__ = fail
    monkeypatch.setitem(sys.modules, "deepseek_vl2", types.ModuleType("deepseek_vl2"))
    monkeypatch.setitem(sys.modules, "deepseek_vl2.models", broken)
    with pytest.raises(VRHError, match="failed to import.*LlamaFlashAttention2.*own environment"):
        import_deepseek_vl2()
