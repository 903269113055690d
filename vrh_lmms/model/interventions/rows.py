"""Where a decoder layer's attention call sits in the sequence, and what its mask lets each row see.

Interventions act on the *answer rows*: the positions that emit answer tokens (the last prompt position, then every
generated token). Inside `generate` a layer is called once for the prompt (prefill: as many queries as keys) and
then once per new token (one query, keys from the KV cache), so a per-layer counter gives every call's absolute
query positions and the absolute position of its first key, also when a sliding-window cache drops old keys. A call
with as many queries as keys starts a new sequence (a prefill, or a plain full forward).

The masks reproduce what the base attention function makes of its `attention_mask`: sdpa booleans (True = attend),
additive float masks (eager), or None (sdpa: causal when there is more than one query; eager: nothing masked).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vrh_lmms.base.errors import VRHError


@dataclass(frozen=True)
class CallRows:
    """One attention call: absolute positions of its queries (q,), of its first key, and the sequence's prompt."""

    query_positions: torch.Tensor
    key_start: int
    prompt_len: int

    def answer_rows(self, prompt_len: int | None = None) -> torch.Tensor:
        """(q,) bool: rows that emit an answer token (position >= prompt_len - 1)."""
        p = self.prompt_len if prompt_len is None else prompt_len
        return self.query_positions >= p - 1


class RowTracker:
    """Per-layer position counters over one sequence at a time (reset by every call with q_len == kv_len)."""

    def __init__(self) -> None:
        self._seen: dict[int, int] = {}
        self._prompt: dict[int, int] = {}

    def step(self, layer: int, q_len: int, kv_len: int, device: torch.device) -> CallRows:
        if q_len == kv_len or layer not in self._seen:
            if q_len != kv_len:
                raise VRHError(f"layer {layer}: the first attention call of a sequence has {q_len} queries but "
                               f"{kv_len} keys; interventions need a fresh (dynamic) cache per sequence")
            self._seen[layer], self._prompt[layer] = 0, q_len
        start = self._seen[layer]
        self._seen[layer] = start + q_len
        key_start = self._seen[layer] - kv_len
        if key_start < 0:
            raise VRHError(f"layer {layer}: {kv_len} keys for {self._seen[layer]} positions seen; static or "
                           "pre-filled caches are not supported by attention interventions")
        return CallRows(torch.arange(start, start + q_len, device=device), key_start, self._prompt[layer])


def is_causal_call(module, kwargs: dict) -> bool:
    flag = kwargs.get("is_causal")
    return bool(getattr(module, "is_causal", True) if flag is None else flag)


def visible(attention_mask: torch.Tensor | None, batch: int, q_len: int, kv_len: int, base: str, causal: bool,
            device: torch.device) -> torch.Tensor:
    """(batch, 1|heads, q, kv) bool: which keys each row of this call attends to."""
    if attention_mask is None:
        if base == "sdpa" and causal and q_len > 1:
            # sdpa's is_causal: upper-left aligned (transformers crops the keys to the queries first)
            q = torch.arange(q_len, device=device)[:, None]
            k = torch.arange(kv_len, device=device)[None, :]
            return ((k <= q) & (k < q_len))[None, None].expand(batch, 1, q_len, kv_len)
        return torch.ones(batch, 1, q_len, kv_len, dtype=torch.bool, device=device)
    if attention_mask.dim() != 4:
        raise VRHError(f"attention interventions expect a 4D attention mask, got shape {tuple(attention_mask.shape)}")
    m = attention_mask[..., :kv_len].expand(batch, -1, q_len, -1)
    if m.dtype == torch.bool:
        return m
    return m > torch.finfo(m.dtype).min / 2


def additive(attention_mask: torch.Tensor | None, batch: int, q_len: int, kv_len: int, base: str, causal: bool,
             dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(batch, 1|heads, q, kv) additive float mask equal in effect to `attention_mask` under `base`.

    Booleans become 0 / -inf, which is exactly what sdpa does with them (outputs stay bit-identical, fully masked
    rows included); float masks are returned as they are (sliced to the keys)."""
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        if attention_mask.dim() != 4:
            raise VRHError(f"attention interventions expect a 4D attention mask, got {tuple(attention_mask.shape)}")
        return attention_mask[..., :kv_len].expand(batch, -1, q_len, -1)
    allowed = visible(attention_mask, batch, q_len, kv_len, base, causal, device)
    zero = torch.zeros((), dtype=dtype, device=device)
    return torch.where(allowed, zero, torch.tensor(float("-inf"), dtype=dtype, device=device))


def keys_in_window(positions: torch.Tensor, key_start: int, kv_len: int) -> torch.Tensor:
    """(batch, P) bool over absolute positions -> (batch, kv_len) over this call's keys (False past P)."""
    b, p = positions.shape
    out = torch.zeros(b, kv_len, dtype=torch.bool, device=positions.device)
    stop = min(p, key_start + kv_len)
    if stop > key_start:
        out[:, :stop - key_start] = positions[:, key_start:stop]
    return out
