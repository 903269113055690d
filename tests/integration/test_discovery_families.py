"""Discovery through every HF-class family's vrh_* backend: the interceptor sees the backend's own inputs, the
family's layout finds the image tokens, capture runs, and a complete heads file comes out."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.runs.discovery.run import DiscoverySpec, run_discovery, sidecars
from vrh_lmms.runs.discovery.scoring import all_cells
from vrh_lmms.runs.discovery.store import PartStore

torch.set_num_threads(1)

QWEN_PIXELS = f"min_pixels={28 * 28 * 16},max_pixels={28 * 28 * 64}"
CASES = [
    ("vrh_qwen25", "qwen2_5_vl", QWEN_PIXELS),
    ("vrh_qwen3", "qwen3_vl", QWEN_PIXELS),
    ("vrh_internvl", "internvl", ""),
    ("vrh_llava_next", "llava_next", ""),
    ("vrh_glm4v", "glm4v", ""),
    ("vrh_paligemma", "paligemma", ""),
    ("vrh_qwen25_omni", "qwen2_5_omni", ""),  # Qwen2.5-VL's image layout, through the thinker's decoder
]
N = 2


@pytest.mark.parametrize("model_id,family,extra", CASES, ids=[c[0] for c in CASES])
def test_discovery_runs_on_family(model_id, family, extra, tiny_checkpoints, tmp_path, monkeypatch):
    from vrh_lmms.harness import lmms

    monkeypatch.setenv("VRH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": N, "seed": 7, "scene": {"image_size": 168}}))
    ckpt = tiny_checkpoints(family)
    args = ",".join(a for a in (f"pretrained={ckpt}", "dtype=float32", extra) if a)
    lm = lmms.build_model(model_id, args)
    out = tmp_path / "heads.json"
    run_discovery(DiscoverySpec(model=model_id, model_args=args, tasks=["vrh_synth_grounding"], output=str(out),
                                limit=N, gen_kwargs="max_new_tokens=6"), lm=lm)
    hf = load_heads_file(out)
    assert hf.geometry == lm.vrh_decoder.geometry and hf.model["family"] == lm.vrh_family
    assert hf.scoring["n_samples"] == N and set(hf.cells) == set(all_cells())
    store = PartStore(sidecars(out)["parts"])
    for key in store.keys():
        part = store.read(key)
        assert part.meta["n_image_tokens"] > 0 and part.meta["n_box_tokens"] >= 1, part.meta
        assert part.meta["rows"]["in"] >= 1, "the referring expression was not found in the prompt"
        if part.meta["rows"]["out"]:
            mass = part.stats["in_sum"]
            assert np.all((mass >= 0) & (mass <= 1 + 1e-6))
    # The box tokens are a subset of the image tokens: mass on the box never exceeds mass on the whole image,
    # which for a softmax row is at most 1.
    assert np.nanmax(np.asarray(hf.cells["out,sum,mean"]["scores"])) <= 1 + 1e-6


def _incremental_span(tokenizer, ids: list[int], needle: str) -> list[int]:
    """Positions of the tokens covering the needle, from incremental decoding (the text of ids[:i+1] minus that of
    ids[:i]): independent of the fast tokenizer's offsets, which discovery uses."""
    ends = [len(tokenizer.decode(ids[:i + 1], skip_special_tokens=False)) for i in range(len(ids))]
    text = tokenizer.decode(ids, skip_special_tokens=False)
    assert text.count(needle) == 1
    begin = text.index(needle)
    starts = [0, *ends[:-1]]
    return [i for i, (a, b) in enumerate(zip(starts, ends, strict=True)) if a < begin + len(needle) and b > begin]


# families added with their wrappers (their box discovery: test_families_end_to_end.py)
TEXT_CASES = CASES + [("vrh_llava", "llava", ""), ("vrh_llava_onevision", "llava_onevision", ""),
                      ("vrh_gemma3", "gemma3", ""), ("vrh_smolvlm", "idefics3", ""), ("vrh_mistral3", "mistral3", ""),
                      ("vrh_llama4", "llama4", "")]
TEXT_CASES.append(("vrh_qwen3_5", "qwen3_5", "enable_thinking=False"))  # hybrid: NaN outside the attention layers
TEXT_CASES.append(("vrh_gemma4", "gemma4", ""))
TEXT_CASES.append(("vrh_llava_onevision1_5", "llava_onevision1_5", ""))
# backends that cannot take a prompt without an image: the doc shows a plain one. LLaVA-NeXT's and PaliGemma's
# processors refuse it; lmms-eval's qwen2_5_omni builds the user turn only from a doc's visuals, so a text-only doc
# reaches the model without its question (docs/evidence.md)
NEEDS_IMAGE = {"llava_next": 64, "paligemma": 64, "qwen2_5_omni": 64,
               # llava_hf and idefics2 hand the processor an empty image list, which it refuses
               "llava": 64, "llava_onevision": 64, "idefics3": 64}


@pytest.mark.parametrize("model_id,family,extra", TEXT_CASES, ids=[c[0] for c in TEXT_CASES])
def test_text_span_discovery_equals_eager_on_family(model_id, family, extra, tiny_checkpoints, tmp_path,
                                                    monkeypatch):
    """Text-span evidence on every family's own backend, chat template and tokenizer: the needle task (text only)
    runs through discovery, and each doc's captured attention of the answer rows on the needle's tokens equals eager
    attention on the inputs discovery forwarded."""
    from oracles.intervention_refs import answer_rows_mass, eager_attentions

    from vrh_lmms.base.families import get_family
    from vrh_lmms.harness import lmms
    from vrh_lmms.model.tiny.registry import TINY_FACTORIES
    from vrh_lmms.runs.discovery import collector as collector_mod
    from vrh_lmms.tasks.common.text_needle import make_doc, needle_config

    if family not in TINY_FACTORIES:
        pytest.skip(f"no tiny {family}")
    config = {"n": N, "seed": 5, "pairs": 3, "format": "sentence", "image": NEEDS_IMAGE.get(family, 0)}
    monkeypatch.setenv("VRH_NEEDLE_CONFIG", json.dumps(config))
    ckpt = tiny_checkpoints(family)
    args = ",".join(a for a in (f"pretrained={ckpt}", "dtype=float32", extra) if a)
    lm = lmms.build_model(model_id, args)
    inputs, seen = {}, {}
    real_forward, real_sample = collector_mod.teacher_forced_inputs, collector_mod.SampleCollector._sample

    def forward(*a, **kw):
        seen["batch"] = real_forward(*a, **kw)
        return seen["batch"]

    def sample(self, tensors, answer, expression, target, kind, key, *a, **kw):
        result = real_sample(self, tensors, answer, expression, target, kind, key, *a, **kw)
        inputs[key] = seen.pop("batch")
        return result

    monkeypatch.setattr(collector_mod, "teacher_forced_inputs", forward)
    monkeypatch.setattr(collector_mod.SampleCollector, "_sample", sample)
    out = tmp_path / "heads.json"
    run_discovery(DiscoverySpec(model=model_id, model_args=args, tasks=["vrh_synth_text_needle"], output=str(out),
                                limit=N, gen_kwargs="max_new_tokens=4"), lm=lm)
    hf = load_heads_file(out)
    assert hf.scoring["evidence"] == "text" and hf.model["family"] == get_family(family).name
    store = PartStore(sidecars(out)["parts"])
    tokenizer = lm.tokenizer if hasattr(lm.tokenizer, "decode") else lm.processor.tokenizer
    assert len(store.keys()) == N
    for key in store.keys():
        part, batch = store.read(key), inputs[key]
        doc = make_doc(int(key.rsplit("__", 1)[1]), needle_config())
        ids = batch["input_ids"][0].tolist()
        prompt_len, n = len(ids) - part.meta["n_answer"], part.meta["n_answer"]
        span = _incremental_span(tokenizer, ids[:prompt_len], doc["vrh_evidence"]["text"])
        assert part.meta["n_box_tokens"] == len(span) and n >= 1
        assert (part.meta["n_image_tokens"] > 0) == bool(config["image"])
        attn = eager_attentions(lm.model, batch)[0].double()
        expect = answer_rows_mass(attn, prompt_len, n, span)
        np.testing.assert_allclose(part.stats["out_sum"], expect, atol=2e-5)
