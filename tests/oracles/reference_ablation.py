"""Independent reference for head ablation: edit heads in attention-output space, through the attention interface.

This shares no code with vrh_lmms.model.ablation (which edits o_proj weights or o_proj inputs): the registered attention
function runs the model's own sdpa/eager attention and then overwrites head h of the (batch, seq, heads, dim)
output before the module reshapes it for o_proj. By default it runs the same kernel the text stack runs now: eager
where the family requires it (Gemma2's soft-capping, which sdpa refuses), sdpa otherwise.
"""

from __future__ import annotations

import contextlib

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask

_STATE: dict = {"heads": {}, "fill": None, "base": "sdpa"}


def _reference(module, query, key, value, attention_mask, **kwargs):
    if _STATE["base"] == "eager":
        import importlib

        mod = importlib.import_module(type(module).__module__)
        out, weights = mod.eager_attention_forward(module, query, key, value, attention_mask, **kwargs)
    else:
        out, weights = sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    out = out.clone()
    for h in _STATE["heads"].get(module.layer_idx, []):
        fill = _STATE["fill"]
        out[:, :, h, :] = 0 if fill is None else fill[module.layer_idx, h].to(out.dtype)
    return out, weights


AttentionInterface.register("vrh_test_reference", _reference)
AttentionMaskInterface.register("vrh_test_reference", sdpa_mask)


@contextlib.contextmanager
def reference_ablation(model, heads, fill: torch.Tensor | None = None, base: str | None = None,
                       text_key="text_config"):
    """Run `model` with `heads` zeroed (or set to `fill[layer, head]`) in attention-output space.

    `base` is the attention kernel underneath ("sdpa" or "eager"); None keeps the kernel the text stack runs now.
    """
    by_layer: dict[int, list[int]] = {}
    for h in heads:
        by_layer.setdefault(h.layer, []).append(h.head)
    previous = getattr(model.config, text_key, model.config)._attn_implementation
    if base is None:
        base = "eager" if previous == "eager" else "sdpa"
    _STATE.update(heads=by_layer, fill=fill, base=base)
    if base == "eager":
        AttentionMaskInterface.register("vrh_test_reference", ALL_MASK_ATTENTION_FUNCTIONS["eager"])
    model.set_attn_implementation({text_key: "vrh_test_reference"} if text_key else "vrh_test_reference")
    try:
        yield
    finally:
        model.set_attn_implementation({text_key: previous} if text_key else previous)
        AttentionMaskInterface.register("vrh_test_reference", sdpa_mask)
        _STATE.update(heads={}, fill=None, base="sdpa")
