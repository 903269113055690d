"""An independent reference for the KV policy (vrh_lmms.model.kvcache), usable on any model whose text attention
runs through transformers' attention interface: a family's tiny checkpoint with real images, or a generic tiny
checkpoint of a model type with stand-in "image" tokens (no tests here).

What the policy promises (docs/applications.md, "KV cache"): prefill sees every key; every later token's query heads
of a (layer, KV group) that does not keep the image see none of its droppable image keys (image positions that are
neither among the first `sink` nor the last `recent` prompt positions). So the tokens generated under the policy,
fed back in ONE cache-free forward in which the answer rows of those heads have those keys masked out, must give the
logits generate gave at every step. The reference shares no code with vrh_lmms.model.kvcache or the attention
edits: it registers its own attention function, which runs the model's own eager attention (or sdpa where the
modeling module has no eager function) with a per-head mask it builds from the policy's documented rule.

`check_kv_policy` runs, on one prompt, a policy whose layer 0 mixes a keeping and dropping groups and whose other
layers drop the image in every group (so `compress` shrinks them), in the modes mask, compress and compact, and
checks: nothing dropped is bit-identical to plain generate; mask equals the reference; compress and compact give
mask's tokens and logits within float rounding; the policy moves the decode logits (the control); compress and
compact hold fewer cache bytes, exactly what they claim.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, eager_mask
from transformers.utils import ModelOutput

from vrh_lmms.base.heads.geometry import HeadRef
from vrh_lmms.model.backbone import locate_decoder
from vrh_lmms.model.capture.attention import text_attention_target
from vrh_lmms.model.kvcache.apply import kv_compressed
from vrh_lmms.model.kvcache.policy import RECENT, SINK, no_policy, retrieval_policy

REFERENCE_IMPL = "vrh_kv_reference"
GEN = dict(do_sample=False, output_logits=True, return_dict_in_generate=True)
ATOL = 1e-4  # eager reference vs the model's sdpa, and fewer terms in compacted softmax sums


@dataclass
class _Active:
    """The reference's per-forward state: layer of each text attention module, dropped keys per (layer, group)."""

    layers: dict[int, int]
    drop: torch.Tensor  # (layers, kv_heads, seq) bool
    prompt_len: int
    rep: int


_ACTIVE: list[_Active] = []


def _eager_of(module) -> Callable | None:
    return getattr(importlib.import_module(type(module).__module__), "eager_attention_forward", None)


def _reference_attention(module, query, key, value, attention_mask, **kwargs):
    state = _ACTIVE[-1] if _ACTIVE else None
    layer = state.layers.get(id(module)) if state else None
    eager = _eager_of(module)
    if layer is None:  # not a decoder layer of the model under check (a vision tower): unchanged
        base = eager or sdpa_attention_forward
        return base(module, query, key, value, attention_mask, **kwargs)
    b, heads, q_len, _ = query.shape
    kv_len = key.shape[2]
    assert q_len == kv_len, "the reference is one cache-free forward"
    if attention_mask is None:
        allowed = torch.ones(q_len, kv_len, dtype=torch.bool).tril()[None, None].expand(b, heads, -1, -1)
    else:
        m = attention_mask[..., :kv_len]
        allowed = (m if m.dtype == torch.bool else m > torch.finfo(m.dtype).min / 2).expand(b, heads, q_len, kv_len)
    allowed = allowed.clone()
    # rows after the prompt (the answer's tokens) of every query head lose the keys its KV group dropped
    drop = state.drop[layer].repeat_interleave(state.rep, dim=0)  # (heads, seq)
    answer = torch.arange(q_len) >= state.prompt_len
    hidden = drop[:, None, :kv_len] & answer[None, :, None]  # (heads, q, kv)
    allowed &= ~hidden[None].to(allowed.device)
    if eager is not None:
        mask = torch.zeros(allowed.shape, dtype=query.dtype, device=query.device)
        mask.masked_fill_(~allowed, torch.finfo(query.dtype).min)
        return eager(module, query, key, value, mask, **kwargs)
    return sdpa_attention_forward(module, query, key, value, allowed, **kwargs)


AttentionInterface.register(REFERENCE_IMPL, _reference_attention)
AttentionMaskInterface.register(REFERENCE_IMPL, eager_mask)


def _nested(key: str, value: str) -> dict | str:
    out: dict | str = value
    for part in reversed(key.split(".")) if key else [""]:
        out = {part: out}
    return out


def reference_logits(model, inputs: dict, sequence: torch.Tensor, image: torch.Tensor, kept: set[tuple[int, int]]
                     ) -> torch.Tensor:
    """Logits of one cache-free forward over `sequence` (prompt + answer, batch 1) whose answer rows see, in every
    (layer, KV group) outside `kept`, none of the prompt's droppable image keys (`image`: (prompt,) bool)."""
    dec = locate_decoder(model)
    g = dec.geometry
    prompt_len = image.shape[0]
    pos = torch.arange(prompt_len)
    droppable = image & (pos >= SINK) & (pos < prompt_len - RECENT)
    drop = torch.zeros(g.layers, g.kv_heads, sequence.shape[1], dtype=torch.bool)
    for layer in range(g.layers):
        for group in range(g.kv_heads):
            if (layer, group) not in kept:
                drop[layer, group, :prompt_len] = droppable
    state = _Active({id(a): i for i, a in enumerate(dec.attns)}, drop, prompt_len, g.heads // g.kv_heads)
    target, key = text_attention_target(model, dec.text_config)
    previous = dec.text_config._attn_implementation
    target.set_attn_implementation(_nested(key, REFERENCE_IMPL))
    assert dec.text_config._attn_implementation == REFERENCE_IMPL
    _ACTIVE.append(state)
    try:
        with torch.no_grad():
            out = model(**extended(model, inputs, sequence), use_cache=False)
    finally:
        _ACTIVE.pop()
        target.set_attn_implementation(_nested(key, previous))
    return out.logits


def extended(model, inputs: dict, sequence: torch.Tensor) -> dict:
    """The prompt's model inputs for `sequence` (the prompt and the answer): per-token tensors grown as generate
    grows them (the model's own `_update_model_kwargs_for_generation`: the attention mask by ones, PaliGemma's
    token types by ones, others by their last value); any it leaves alone, by zeros."""
    prompt = inputs["input_ids"]
    extra = sequence.shape[1] - prompt.shape[1]
    per_token = {k: v for k, v in inputs.items()
                 if k != "input_ids" and isinstance(v, torch.Tensor) and v.shape[:2] == prompt.shape}
    grown = dict(per_token)
    for _ in range(extra):
        grown = model._update_model_kwargs_for_generation(ModelOutput(), grown)
    out = dict(inputs, input_ids=sequence)
    for name, value in per_token.items():
        new = grown.get(name)
        if not isinstance(new, torch.Tensor) or new.shape[1] != sequence.shape[1]:
            new = torch.cat([value, value.new_zeros(value.shape[0], extra, *value.shape[2:])], dim=1)
        out[name] = new
    return out


@dataclass
class KVCheck:
    """What one model's check measured (for reports): layers shrunk by compress, compacted by compact, and the
    largest deviation of mask from the reference."""

    shrunk: list[int]
    compacted: list[int]
    max_diff: float


def _generate(model, inputs, new_tokens, comp_ids=None, policy=None, mode="mask"):
    kwargs = dict(GEN, max_new_tokens=new_tokens, min_new_tokens=new_tokens)
    if policy is None:
        with torch.no_grad():
            return model.generate(**inputs, **kwargs), None
    with kv_compressed(model, policy, mode) as comp:
        if comp_ids is not None:
            comp.ids = comp_ids  # stand-in "image" tokens of a model driven by text only
        with torch.no_grad():
            out = model.generate(**inputs, **kwargs)
    return out, comp


def check_kv_policy(model, inputs: dict, image_ids: list[int] | None = None, new_tokens: int = 4) -> KVCheck:
    """The module docstring's checks on one prompt (`inputs`, batch 1). `image_ids`: the token ids the policy
    treats as image placeholders (default: the config's, as `vrh-lmms kv-cache` runs)."""
    ids = inputs["input_ids"]
    assert ids.shape[0] == 1, "one prompt"
    g = locate_decoder(model).geometry
    comp_ids = torch.tensor(image_ids) if image_ids is not None else None
    plain, _ = _generate(model, inputs, new_tokens)
    same, comp = _generate(model, inputs, new_tokens, comp_ids, no_policy(g), "mask")
    assert comp.stats[0]["dropped_slots"] == 0
    assert torch.equal(same.sequences, plain.sequences), "nothing dropped changed the answer"
    assert all(torch.equal(a, b) for a, b in zip(same.logits, plain.logits)), "nothing dropped moved the logits"

    # layer 0: group 0 keeps the image, the other groups drop it; every other layer drops it in all groups
    policy = retrieval_policy([HeadRef(0, 0)], g, 1 / (g.layers * g.kv_heads))
    kept = {(0, 0)}
    assert {tuple(x) for x in torch.nonzero(torch.from_numpy(policy.groups)).tolist()} == kept
    runs = {mode: _generate(model, inputs, new_tokens, comp_ids, policy, mode) for mode in ("mask", "compress",
                                                                                              "compact")}
    masked, comp = runs["mask"]
    image = torch.isin(ids[0], comp.ids)
    assert comp.stats[0]["dropped_slots"] > 0, "the policy dropped nothing: no image tokens in the prompt?"
    seq = masked.sequences
    ref = reference_logits(model, inputs, seq[:, :-1], image, kept)[0, ids.shape[1] - 1:]
    got = torch.cat(masked.logits)
    assert ref.shape == got.shape, (ref.shape, got.shape)
    max_diff = float((ref - got).abs().max())
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=ATOL, msg=lambda m: f"mask vs reference: {m}")
    plain_steps = torch.cat(plain.logits)
    torch.testing.assert_close(got[0], plain_steps[0], rtol=0, atol=0, msg="prefill is not masked")
    if torch.equal(seq, plain.sequences):  # same tokens: the decode logits must differ where keys were hidden
        assert not torch.allclose(got[1:], plain_steps[1:], atol=ATOL), "the policy moved no decode logit"
    for mode in ("compress", "compact"):
        out, c = runs[mode]
        assert torch.equal(out.sequences, seq), f"{mode}: other tokens than mask"
        torch.testing.assert_close(torch.cat(out.logits), got, rtol=1e-4, atol=ATOL, msg=lambda m: f"{mode}: {m}")
        stats = c.stats[0]
        assert stats["cache_bytes_after"] == stats["cache_bytes_claimed"], mode
        # compress frees every layer it shrinks; compact frees a layer unless one of its groups keeps every image
        # key (layer 0's group 0 here)
        layers = stats["shrunk_layers"] if mode == "compress" else [x for x in stats["compacted_layers"] if x]
        assert (stats["cache_bytes_after"] < stats["cache_bytes_before"]) == bool(layers), mode
    return KVCheck(runs["compress"][1].stats[0]["shrunk_layers"], runs["compact"][1].stats[0]["compacted_layers"],
                   max_diff)
