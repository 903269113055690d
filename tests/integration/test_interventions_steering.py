"""Attention steering through the registered attention function: exact at zero bias on every tiny family (full
forward and generate with the KV cache), and equal to eager attention re-weighted by hand at a non-zero bias."""

from __future__ import annotations

import math

import pytest
import torch
from oracles.intervention_refs import eager_probs, head_slice, layer_tensors

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import HeadRef
from vrh_lmms.model.backbone import installed_rows_hooks, locate_decoder
from vrh_lmms.model.interventions.steering import SteerPlan, steer_attention
from vrh_lmms.model.tiny.inputs import load_tiny, processor_inputs

torch.set_num_threads(1)

FAMILIES = ["qwen2_5_vl", "qwen3_vl", "internvl", "llava_next", "paligemma", "glm4v", "idefics3",
            "qwen2_5_omni"]
GEN = {"max_new_tokens": 4, "do_sample": False, "output_scores": True, "return_dict_in_generate": True}


@pytest.fixture(scope="module", params=FAMILIES)
def family_model(request, tiny_checkpoints):
    model, processor = load_tiny(tiny_checkpoints(request.param))
    return request.param, model, processor_inputs(processor, n=2)  # left-padded batch of two prompts


def image_keys(model, batch, seed: int = 0) -> torch.Tensor:
    """A random half of the image tokens of each sample (a stand-in for another object's box)."""
    ids = batch["input_ids"]
    img = ids == model.config.image_token_id
    g = torch.Generator().manual_seed(seed)
    return img & (torch.rand(ids.shape, generator=g) > 0.5)


def spread_heads(model) -> list[HeadRef]:
    g = locate_decoder(model).geometry
    return [HeadRef(0, 0), HeadRef(g.layers - 1, g.heads - 1)]


def test_zero_bias_is_bit_identical(family_model):
    _, model, batch = family_model
    t = batch["input_ids"].shape[1]
    plan_full = SteerPlan(spread_heads(model), image_keys(model, batch), 0.0, prompt_len=t - 3)
    plan_gen = SteerPlan(spread_heads(model), image_keys(model, batch), 0.0)
    with torch.no_grad():
        plain = model(**batch).logits
        plain_gen = model.generate(**batch, **GEN)
        with steer_attention(model, plan_full):
            steered = model(**batch).logits
        with steer_attention(model, plan_gen):
            steered_gen = model.generate(**batch, **GEN)
    assert torch.equal(steered, plain)
    assert torch.equal(steered_gen.sequences, plain_gen.sequences)
    assert all(torch.equal(a, b) for a, b in zip(steered_gen.scores, plain_gen.scores))
    assert not installed_rows_hooks()


def test_bias_changes_only_the_answer_rows(family_model):
    """A real bias moves the logits of the answer rows and of nothing before them (causality, row selection).

    PaliGemma's prompt is a bidirectional prefix: its earlier rows read the steered last prompt row in later layers,
    so only the answer rows are checked there."""
    family, model, batch = family_model
    t = batch["input_ids"].shape[1]
    prompt_len = t - 3
    plan = SteerPlan(spread_heads(model), image_keys(model, batch), 8.0, prompt_len=prompt_len)
    with torch.no_grad():
        plain = model(**batch).logits
        with steer_attention(model, plan):
            steered = model(**batch).logits
    if family != "paligemma":
        assert torch.equal(steered[:, :prompt_len - 1], plain[:, :prompt_len - 1])
    assert (steered[:, prompt_len - 1:] - plain[:, prompt_len - 1:]).abs().max() > 1e-4


@pytest.mark.parametrize("family", ["qwen2_5_vl", "paligemma"])
def test_steered_head_equals_reweighted_eager_attention(family, tiny_checkpoints):
    """Layer 0, one head: the steered output equals sum_j p'_j v_j with p' = p * e^(b [j in S]) / Z computed by hand
    from eager probabilities; other heads and rows are untouched. PaliGemma adds soft-capping (eager base) and the
    bidirectional prefix."""
    model, processor = load_tiny(tiny_checkpoints(family))
    batch = processor_inputs(processor, n=2)
    t = batch["input_ids"].shape[1]
    prompt_len, bias, head = t - 4, 3.0, 1
    g = locate_decoder(model).geometry
    keys = image_keys(model, batch, seed=1)
    probs = eager_probs(model, batch)[:, 0, head]  # (b, T, T)
    with torch.no_grad(), layer_tensors(model, 0) as plain:
        model(**batch)
    plan = SteerPlan([HeadRef(0, head)], keys, bias, prompt_len=prompt_len)
    with torch.no_grad(), layer_tensors(model, 0) as steered, steer_attention(model, plan):
        model(**batch)
    rows = slice(prompt_len - 1, t)
    weight = probs[:, rows] * torch.exp(bias * keys.float())[:, None, :]
    weight = weight / weight.sum(-1, keepdim=True)
    v = plain["v"][:, head // (g.heads // g.kv_heads)]  # (b, T, d)
    expected = torch.matmul(weight, v)
    got = head_slice(steered["o_in"], head, g.head_dim)
    torch.testing.assert_close(got[:, rows], expected, rtol=0, atol=2e-5)
    torch.testing.assert_close(got[:, :prompt_len - 1], head_slice(plain["o_in"], head, g.head_dim)[:, :prompt_len - 1],
                               rtol=0, atol=0)
    others = [h for h in range(g.heads) if h != head]
    for h in others:
        assert torch.equal(head_slice(steered["o_in"], h, g.head_dim), head_slice(plain["o_in"], h, g.head_dim))
    # the mass on the steered keys follows the closed form m' = m e^b / (m e^b + 1 - m)
    m = (probs[:, rows] * keys[:, None, :].float()).sum(-1)
    m_steered = (weight * keys[:, None, :].float()).sum(-1)
    torch.testing.assert_close(m_steered, m * math.e ** bias / (m * math.e ** bias + 1 - m), rtol=1e-5, atol=1e-6)
    assert (m_steered > m).all()


def test_plan_checks(tiny_checkpoints):
    model, processor = load_tiny(tiny_checkpoints("qwen2_5_vl"))
    batch = processor_inputs(processor, n=2)
    keys = image_keys(model, batch)
    with pytest.raises(VRHError, match="bool"):
        SteerPlan([HeadRef(0, 0)], keys.long(), 1.0)
    with pytest.raises(VRHError, match="outside the model"):
        with steer_attention(model, SteerPlan([HeadRef(9, 0)], keys, 1.0)):
            pass
    with pytest.raises(VRHError, match="batch"), torch.no_grad(), steer_attention(
            model, SteerPlan([HeadRef(0, 0)], keys[:1], 1.0)):
        model(**batch)
    assert not installed_rows_hooks() and locate_decoder(model).text_config._attn_implementation == "sdpa"
