"""Hand-computed references for the attention interventions: eager probabilities and value states of a layer, and the
head outputs (o_proj inputs) the model actually produced."""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from vrh_lmms.model.backbone import locate_decoder


def eager_attentions(model, batch) -> torch.Tensor:
    """(batch, layers, heads, T, T) from eager `output_attentions=True`, text stack only, in the model's dtype
    (Qwen2.5-Omni: its thinker, the part that reads the prompt); NaN for a hybrid decoder's layers without heads."""
    dec = locate_decoder(model)
    target = getattr(model, "thinker", model)
    previous = dec.text_config._attn_implementation
    target.set_attn_implementation({"text_config": "eager"})
    try:
        with torch.no_grad():
            out = target(**batch, output_attentions=True)
    finally:
        target.set_attn_implementation({"text_config": previous})
    g = dec.geometry
    got = torch.stack(out.attentions, dim=1)
    if len(out.attentions) == g.layers:
        return got
    # a hybrid decoder (Qwen3.5) returns the attention layers' weights only: NaN rows for the layers without heads
    assert len(out.attentions) == len(g.attention_layers)
    full = torch.full((got.shape[0], g.layers, *got.shape[2:]), float("nan"), dtype=got.dtype)
    full[:, list(g.attention_layers)] = got
    return full


def eager_probs(model, batch) -> torch.Tensor:
    """(batch, layers, heads, T, T) softmax probabilities of the intact model, eager implementation, float32."""
    return eager_attentions(model, batch).float()


@contextlib.contextmanager
def layer_tensors(model, layer: int):
    """Collects the layer's value states (batch, kv_heads, T, d) and o_proj input (batch, T, heads * d)."""
    dec = locate_decoder(model)
    attn, g = dec.attns[layer], dec.geometry
    got: dict[str, torch.Tensor] = {}

    def on_v(module, args, out):
        b, t, _ = out.shape
        got["v"] = out.detach().float().view(b, t, g.kv_heads, g.head_dim).transpose(1, 2)

    def on_o(module, args):
        got["o_in"] = args[0].detach().float().clone()

    handles = [attn.v_proj.register_forward_hook(on_v), dec.out_projs[layer].register_forward_pre_hook(on_o)]
    try:
        yield got
    finally:
        for h in handles:
            h.remove()


def head_slice(o_in: torch.Tensor, head: int, head_dim: int) -> torch.Tensor:
    return o_in[..., head * head_dim:(head + 1) * head_dim]


def answer_rows_mass(attn: torch.Tensor, prompt_len: int, n_answer: int, keys) -> np.ndarray:
    """(layers, heads): the eager attention (`attn`: one doc's (layers, heads, T, T)) of the rows that predict the
    answer's n tokens (prompt_len - 1 onward) summed over the key positions `keys`, averaged over those rows: what
    discovery's `out` rows put on a key set, computed by hand."""
    rows = list(range(prompt_len - 1, prompt_len - 1 + n_answer))
    return attn[:, :, rows][..., list(keys)].sum(-1).mean(-1).numpy()
