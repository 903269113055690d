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

_STATE: dict = {"heads": {}, "fill": None, "base": "sdpa", "hidden": {}}


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
        if fill is None:
            out[:, :, h, :] = 0
            continue
        value = fill[module.layer_idx, h, :out.shape[-1]].to(out.dtype)  # padded means: a narrower layer's first part
        gate = _output_gate(module)
        # a gated attention (Qwen3.5: o_proj reads attention * sigmoid(gate)) writes the fill the gate lets through;
        # the head's output, what o_proj reads, is set to the fill
        out[:, :, h, :] = value if gate is None else value / gate[:, :, h, :]
    return out, weights


def _output_gate(module) -> torch.Tensor | None:
    """sigmoid(gate) per head, (batch, seq, heads, head_dim), recomputed from the module's own q_proj for attention
    modules that gate their output (Qwen3.5's `q_proj` writes query and gate per head), else None."""
    hidden = _STATE["hidden"].get(id(module))
    if hidden is None:
        return None
    heads = module.q_proj(hidden).view(*hidden.shape[:-1], -1, module.head_dim * 2)
    return torch.sigmoid(torch.chunk(heads, 2, dim=-1)[1])


def _gates_output(module) -> bool:
    """An attention whose q_proj writes twice the heads' width: query and output gate per head (Qwen3.5)."""
    q, config = getattr(module, "q_proj", None), getattr(module, "config", None)
    heads, dim = getattr(config, "num_attention_heads", None), getattr(module, "head_dim", None)
    return (hasattr(module, "layer_idx") and isinstance(heads, int) and isinstance(dim, int)
            and getattr(q, "out_features", None) == 2 * heads * dim)


def _stash_hidden(module, args, kwargs):
    _STATE["hidden"][id(module)] = args[0] if args else kwargs["hidden_states"]


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
    gated = [m for m in model.modules() if _gates_output(m)] if fill is not None else []
    hooks = [m.register_forward_pre_hook(_stash_hidden, with_kwargs=True) for m in gated]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()
        _STATE["hidden"] = {}
        model.set_attn_implementation({text_key: previous} if text_key else previous)
        AttentionMaskInterface.register("vrh_test_reference", sdpa_mask)
        _STATE.update(heads={}, fill=None, base="sdpa")


def random_means(g, seed: int = 0) -> torch.Tensor:
    """Random per-head means in the means-file layout (vrh_lmms.model.ablation.means_shape): (layers, heads, widest
    head), zeros past a narrower layer's width and in layers without heads."""
    means = torch.randn(g.layers, g.heads, g.max_head_dim, generator=torch.Generator().manual_seed(seed))
    for layer in range(g.layers):
        means[layer, :, g.dim(layer) if g.has_heads(layer) else 0:] = 0
    return means
