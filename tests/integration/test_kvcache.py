"""VRH-aware KV cache: with nothing dropped answers are bit-identical to the intact model; masked decode attention
equals attention over the kept keys only; the shrunk cache answers like masking and holds the bytes it claims; on every
family's tiny checkpoint (real images), the three modes equal an independent reference (support/kv_reference.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from support.kv_reference import check_kv_policy

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import HeadRef
from vrh_lmms.model.backbone import installed_rows_hooks, locate_decoder
from vrh_lmms.model.coverage_kv import KV_FAMILY, KV_MASK_ONLY
from vrh_lmms.model.kvcache.apply import KVCompression, kv_compressed
from vrh_lmms.model.kvcache.policy import dropped, kv_bytes, no_policy, retrieval_policy, uniform_policy
from vrh_lmms.model.tiny.inputs import load_tiny, processor_inputs
from vrh_lmms.model.tiny.registry import TINY_FACTORIES

torch.set_num_threads(1)
GEN = dict(max_new_tokens=5, min_new_tokens=5, do_sample=False, output_logits=True, return_dict_in_generate=True)


@pytest.fixture(scope="module")
def qwen(tiny_checkpoints):
    return load_tiny(tiny_checkpoints("qwen2_5_vl"))


def _generate(model, batch):
    with torch.no_grad():
        return model.generate(**batch, **GEN)


@pytest.mark.parametrize("mode", ["mask", "compress"])
def test_nothing_dropped_is_bit_identical(qwen, mode):
    model, processor = qwen
    batch = processor_inputs(processor, n=2 if mode == "mask" else 1)
    plain = _generate(model, batch)
    g = locate_decoder(model).geometry
    for policy in (no_policy(g), uniform_policy(g, 1.0), retrieval_policy(g.all_heads(), g, 1.0)):
        with kv_compressed(model, policy, mode) as comp:
            got = _generate(model, batch)
        assert torch.equal(got.sequences, plain.sequences)
        assert all(torch.equal(a, b) for a, b in zip(got.logits, plain.logits))
        assert comp.stats and comp.stats[0]["dropped_slots"] == 0 and not comp.shrunk
    assert not installed_rows_hooks()


def test_masked_decode_equals_attention_over_kept_keys(qwen):
    """A hand-built decode call: each query head attends (eager softmax, by hand) only to its group's kept keys."""
    model, _ = qwen
    g = locate_decoder(model).geometry
    rep, prompt, kv = g.heads // g.kv_heads, 6, 8
    comp = KVCompression(model, no_policy(g), "mask")
    try:
        drop = torch.zeros(1, g.layers, g.kv_heads, prompt, dtype=torch.bool)
        drop[0, 0, 0, [1, 3]] = True  # group 0 of layer 0 loses keys 1 and 3; group 1 keeps all
        comp.drop, comp.prompt_len = drop, prompt
        comp._seen = {0: kv - 1, 1: kv - 1}  # one decode call: 7 positions cached before it, its own makes 8
        gen = torch.Generator().manual_seed(0)
        q = torch.randn(1, g.heads, 1, g.head_dim, generator=gen)
        k = torch.randn(1, g.heads, kv, g.head_dim, generator=gen)
        v = torch.randn(1, g.heads, kv, g.head_dim, generator=gen)
        mask = comp.edit_mask(0, locate_decoder(model).attns[0], q, k, None, {}, "sdpa")
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        for h in range(g.heads):
            keep = [j for j in range(kv) if not (h // rep == 0 and j in (1, 3))]
            scores = (q[0, h, 0] @ k[0, h, keep].T) / math.sqrt(g.head_dim)
            expected = torch.softmax(scores, -1) @ v[0, h, keep]
            torch.testing.assert_close(out[0, h, 0], expected, rtol=0, atol=1e-6)
        assert mask[0, 0, 0, 1].item() is False and mask[0, rep, 0, 1].item() is True
        comp._seen = {0: kv - 1}  # the same call again, through the eager path
        additive = comp.edit_mask(0, locate_decoder(model).attns[0], q, k, None, {}, "eager")  # eager: a float mask
        probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(g.head_dim) + additive, -1)
        torch.testing.assert_close(probs @ v, out, rtol=0, atol=1e-6)
        assert comp.edit_mask(1, None, q, k, None, {}, "sdpa") is None  # a layer dropping nothing: untouched
        # a sliding-window layer: 10 positions cached, the cache holds the last 8 (positions 2..9): key 1 is
        # position 3 (dropped for group 0), position 1 is already out of the window
        comp._seen = {0: 9}
        window = comp.edit_mask(0, locate_decoder(model).attns[0], q, k, None, {}, "sdpa")
        expected = torch.ones(g.heads, kv, dtype=torch.bool)
        expected[:rep, 1] = False
        assert torch.equal(window[0, :, 0], expected)
    finally:
        comp.remove()


@pytest.mark.parametrize("which", ["retrieval", "uniform"])
@pytest.mark.parametrize("n", [1, 2])  # 2: left padding, so the decode masks are real tensors gathered to the keys
def test_compressed_cache_answers_like_masking_and_frees_its_bytes(qwen, which, n):
    """Tokens identical and logits allclose (atol 1e-5: fewer terms in the softmax sums, so not bit-identical);
    the cache holds exactly the bytes `kv_bytes(..., physical_only=True)` claims."""
    model, processor = qwen
    g = locate_decoder(model).geometry
    batch = processor_inputs(processor, n=n)
    # retrieval at 0.5: layer 0's groups keep images, layer 1 keeps none (shrinks); uniform: every layer shrinks
    ranking = [HeadRef(0, h) for h in range(g.heads)] + [HeadRef(1, h) for h in range(g.heads)]
    policy = retrieval_policy(ranking, g, 0.5) if which == "retrieval" else uniform_policy(g, 0.25)
    runs = {}
    for mode in ("mask", "compress"):
        with kv_compressed(model, policy, mode) as comp:
            runs[mode] = (_generate(model, batch), comp.stats[0], dict(comp.shrunk))
    (masked, s_mask, _), (shrunk, s_comp, layers) = runs["mask"], runs["compress"]
    assert torch.equal(masked.sequences, shrunk.sequences)
    for a, b in zip(masked.logits, shrunk.logits):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    assert sorted(layers) == ([1] if which == "retrieval" else [0, 1])
    image = torch.isin(batch["input_ids"], torch.tensor([model.config.image_token_id])).numpy()
    seq = batch["input_ids"].shape[1]
    claim = sum(kv_bytes(dropped(policy, row), seq, g.head_dim, 4, physical_only=True) for row in image)
    drop = dropped(policy, image[0])
    full = n * kv_bytes(np.zeros_like(drop), seq, g.head_dim, 4)  # masking holds every slot
    assert s_mask["cache_bytes_after"] == s_mask["cache_bytes_before"] == s_comp["cache_bytes_before"] == full
    assert s_comp["cache_bytes_after"] == claim == s_comp["kv_bytes_physical"] == s_comp["cache_bytes_claimed"]
    assert s_mask["kv_bytes_kept"] == s_comp["kv_bytes_kept"] <= claim and s_mask["kv_bytes_full"] == full
    assert s_comp["cache_bytes_after"] < s_comp["cache_bytes_before"]
    plain = _generate(model, batch)  # the policy really changes the decode steps
    assert any(not torch.allclose(a, b, atol=1e-5) for a, b in zip(plain.logits[1:], masked.logits[1:]))
    torch.testing.assert_close(plain.logits[0], masked.logits[0], rtol=0, atol=0)  # prefill is not masked


@pytest.mark.parametrize("family", ["paligemma", "internvl"])
def test_other_families_mask_and_shrink(family, tiny_checkpoints):
    """The same contract on other layouts: nothing dropped -> bit-identical; uniform pruning shrinks every layer
    and answers like masking."""
    model, processor = load_tiny(tiny_checkpoints(family))
    batch = processor_inputs(processor, n=1)
    g = locate_decoder(model).geometry
    plain = _generate(model, batch)
    with kv_compressed(model, no_policy(g), "compress"):
        same = _generate(model, batch)
    assert torch.equal(same.sequences, plain.sequences)
    assert all(torch.equal(a, b) for a, b in zip(same.logits, plain.logits))
    runs = {}
    for mode in ("mask", "compress"):
        with kv_compressed(model, uniform_policy(g, 0.25), mode) as comp:
            runs[mode] = (_generate(model, batch), comp.stats[0])
    (masked, _), (shrunk, stats) = runs["mask"], runs["compress"]
    # every layer drops the same keys in all groups; the sliding-window layers of Gemma (PaliGemma) stay masked
    assert stats["dropped_slots"] > 0 and len(stats["shrunk_layers"]) == (1 if family == "paligemma" else g.layers)
    assert stats["cache_bytes_after"] == stats["cache_bytes_claimed"] < stats["cache_bytes_before"]
    assert torch.equal(masked.sequences, shrunk.sequences)
    for a, b in zip(masked.logits, shrunk.logits):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


@pytest.mark.parametrize("which", ["retrieval", "uniform"])
@pytest.mark.parametrize("n", [1, 3])  # 3: images of three sizes and left padding: rows keep different counts
def test_compact_cache_answers_like_masking_and_compress(qwen, which, n):
    """Mode compact (every dropping layer gathered into padded per-layer buffers at prefill) gives the tokens of
    mode mask (and of mode compress, which refuses unequal rows), logits within float rounding (atol 1e-5); with
    nothing dropped it is bit-identical to the intact model."""
    model, processor = qwen
    g = locate_decoder(model).geometry
    batch = processor_inputs(processor, n=n, image_sizes=[112, 168, 84][:n])
    ranking = [HeadRef(0, h) for h in range(g.heads)] + [HeadRef(1, h) for h in range(g.heads)]
    # retrieval at 0.25: layer 0's groups differ (some keep the image), layer 1 keeps none; uniform: all alike
    policy = retrieval_policy(ranking, g, 0.25) if which == "retrieval" else uniform_policy(g, 0.25)
    runs = {}
    for mode in ("mask", "compact") + (("compress",) if n == 1 else ()):
        with kv_compressed(model, policy, mode) as comp:
            runs[mode] = (_generate(model, batch), comp)
    masked, (compact, comp) = runs["mask"][0], runs["compact"]
    assert sorted(comp.compacted) == [0, 1]
    if n > 1:
        keep = ~comp.drop[:, 1, 0] & batch["attention_mask"].bool()
        assert len(set(keep.sum(-1).tolist())) == n, "the rows keep different numbers of keys"
    for other in [masked] + ([runs["compress"][0]] if n == 1 else []):
        assert torch.equal(other.sequences, compact.sequences)
        for a, b in zip(other.logits, compact.logits):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    stats = comp.stats[0]
    assert stats["cache_bytes_after"] < stats["cache_bytes_before"]
    plain = _generate(model, batch)
    with kv_compressed(model, no_policy(g), "compact") as comp:
        same = _generate(model, batch)
    assert not comp.compacted and torch.equal(same.sequences, plain.sequences)
    assert all(torch.equal(a, b) for a, b in zip(same.logits, plain.logits))
    assert not installed_rows_hooks()


@pytest.mark.parametrize("family", ["paligemma", "internvl"])
def test_compact_other_families(family, tiny_checkpoints):
    """Other layouts: compact answers like masking; Gemma's sliding-window layers stay masked (not compacted)."""
    model, processor = load_tiny(tiny_checkpoints(family))
    batch = processor_inputs(processor, n=2)
    g = locate_decoder(model).geometry
    runs = {}
    for mode in ("mask", "compact"):
        with kv_compressed(model, uniform_policy(g, 0.25), mode) as comp:
            runs[mode] = (_generate(model, batch), comp)
    (masked, _), (compact, comp) = runs["mask"], runs["compact"]
    assert len(comp.compacted) == (1 if family == "paligemma" else g.layers)
    assert torch.equal(masked.sequences, compact.sequences)
    for a, b in zip(masked.logits, compact.logits):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", sorted(TINY_FACTORIES))
def test_policy_equals_the_reference_on_every_family(family, tiny_checkpoints):
    """Real images through the family's processor: nothing dropped is bit-identical, modes mask / compress / compact
    give the logits of one cache-free forward whose answer rows cannot see the dropped image keys, and free the bytes
    they claim. The coverage table's types verified only here (KV_FAMILY) are this checkpoint's type."""
    model, processor = load_tiny(tiny_checkpoints(family))
    geometry = locate_decoder(model).geometry
    if not geometry.uniform:  # Qwen3.5's hybrid layers, Gemma 4's per-layer widths: refused in one line, said why
        with pytest.raises(VRHError, match="the KV policy needs") as err:
            check_kv_policy(model, dict(processor_inputs(processor, n=1)))
        assert "\n" not in str(err.value)
        return
    found = check_kv_policy(model, dict(processor_inputs(processor, n=1)))
    assert found.shrunk or found.compacted or model.config.model_type in KV_MASK_ONLY
    assert found.max_diff < 1e-4
    for model_type, fam in KV_FAMILY.items():
        if fam == family:
            assert model.config.model_type == model_type
