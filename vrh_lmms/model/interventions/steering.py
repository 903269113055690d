"""Attention steering: add a bias to chosen heads' attention logits from the answer rows to chosen key positions.

This is the sufficiency test for visual retrieval heads: if the top heads route the referred region to the answer,
pushing their attention onto *another* object's image tokens should move the predicted box onto that object, and
random heads should not. The bias enters through the registered attention function that capture uses
(vrh_lmms.model.capture.attention): the layer's mask becomes an additive float mask (0 / -inf where the model's own mask
allows / forbids, exactly what sdpa makes of boolean masks) plus `bias` on the (steered head, answer row, steered
key) entries, and the layer output is computed by the model's own sdpa or eager function. Nothing else changes:
with bias 0 the outputs are bit-identical to the unsteered model (tests/integration/test_interventions_steering.py).

Answer rows are the positions >= prompt_len - 1 (the last prompt position emits the first answer token, every
generated token the next one), tracked through generation with the KV cache (vrh_lmms.model.interventions.rows).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import HeadRef
from vrh_lmms.model.backbone import locate_decoder, unwrap
from vrh_lmms.model.capture.attention import attention_edits
from vrh_lmms.model.interventions.rows import RowTracker, additive, is_causal_call, keys_in_window


@dataclass
class SteerPlan:
    """What to steer in one sequence (or one batch of left-padded sequences).

    heads: the heads whose logits get the bias; keys: (batch, P) bool over absolute key positions (in the prompt)
    to steer toward; bias: added to the logits of those keys (0 = no change); prompt_len: length of the (padded)
    prompt, so answer rows are positions >= prompt_len - 1 (None: the first call's length, i.e. `generate`).
    """

    heads: Sequence[HeadRef]
    keys: torch.Tensor
    bias: float
    prompt_len: int | None = None

    def __post_init__(self) -> None:
        if self.keys.dim() != 2 or self.keys.dtype != torch.bool:
            raise VRHError(f"steering keys must be a (batch, positions) bool tensor, got {self.keys.dtype} "
                           f"{tuple(self.keys.shape)}")
        if len(set(self.heads)) != len(self.heads):
            raise VRHError("steering names a head twice")

    def by_layer(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for h in self.heads:
            out.setdefault(h.layer, []).append(h.head)
        return out


class _SteerEdit:
    """The mask edit of one steering plan, shared by its layers (each layer keeps its own position counter)."""

    def __init__(self, plan: SteerPlan, heads_by_layer: dict[int, list[int]]) -> None:
        self.plan = plan
        self.heads = heads_by_layer
        self.rows = RowTracker()
        self._keys: dict[torch.device, torch.Tensor] = {}

    def _keys_on(self, device: torch.device) -> torch.Tensor:
        if device not in self._keys:
            self._keys[device] = self.plan.keys.to(device)
        return self._keys[device]

    def edit_mask(self, layer, module, query, key, attention_mask, kwargs, base):
        b, n_heads, q_len, _ = query.shape
        kv_len = key.shape[2]
        call = self.rows.step(layer, q_len, kv_len, query.device)
        if b != self.plan.keys.shape[0]:
            raise VRHError(f"steering plan has batch {self.plan.keys.shape[0]}, the forward batch {b} "
                           "(beam search and sampling several sequences are not supported)")
        answer = call.answer_rows(self.plan.prompt_len)
        if not bool(answer.any()):
            return attention_mask
        mask = additive(attention_mask, b, q_len, kv_len, base, is_causal_call(module, kwargs), query.dtype,
                        query.device)
        keys = keys_in_window(self._keys_on(query.device), call.key_start, kv_len)  # (b, kv)
        heads = torch.zeros(n_heads, dtype=torch.bool, device=query.device)
        heads[self.heads[layer]] = True
        where = heads[None, :, None, None] & answer[None, None, :, None] & keys[:, None, None, :]
        bias = torch.where(where, torch.tensor(float(self.plan.bias), dtype=query.dtype, device=query.device),
                           torch.zeros((), dtype=query.dtype, device=query.device))
        return mask + bias

    def edit_output(self, layer, module, query, key, value, attention_mask, kwargs, base, output):
        return output


@contextmanager
def steer_attention(model: nn.Module, plan: SteerPlan, base: str | None = None) -> Iterator[str]:
    """Within the scope, `plan`'s heads are steered in every forward of `model` (generate included)."""
    geometry = locate_decoder(unwrap(model)).geometry
    for h in plan.heads:
        geometry.check(h, where="steered head")
    by_layer = plan.by_layer()
    edit = _SteerEdit(plan, by_layer)
    with attention_edits(model, {layer: edit for layer in by_layer}, base) as used:
        yield used
