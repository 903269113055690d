"""Softmax rows of chosen query positions, reduced on the fly: what one decoder layer contributes to a capture.

The attention output itself is computed elsewhere (sdpa or the model's eager function); this module only rebuilds the
probabilities of the selected rows, exactly as eager attention would (scaling, optional tanh soft-capping, additive
mask, float32 softmax), and immediately reduces them to per-key-set mass and argmax. Peak extra memory is one
(batch, heads, Q, T) float32 block per layer; nothing of size T x T is ever built here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vrh_lmms.base.errors import VRHError


@dataclass
class RowStats:
    """One layer's reduction: mass (batch, heads, Q, K) over K key sets, argmax (batch, heads, Q) or None."""

    mass: torch.Tensor
    argmax: torch.Tensor | None


def _gather_rows(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x (b, h, T, n) -> (b, h, Q, n): rows idx (b, Q) of every head."""
    b, h, _, n = x.shape
    return torch.gather(x, 2, idx[:, None, :, None].expand(b, h, idx.shape[1], n))


def _allowed_from_none(idx: torch.Tensor, kv_len: int, causal: bool) -> torch.Tensor | None:
    """Visibility when the model passed no mask: causal (sdpa's `is_causal`) or everything."""
    if not causal:
        return None
    keys = torch.arange(kv_len, device=idx.device)
    return (keys[None, None, :] <= idx[:, :, None])[:, None]  # (b, 1, Q, T)


def mask_rows(attention_mask: torch.Tensor | None, idx: torch.Tensor, kv_len: int, causal_if_none: bool,
              ) -> torch.Tensor | None:
    """Additive float32 mask rows (b, 1|h, Q, T) for the selected queries, or None when nothing is masked.

    Boolean masks (sdpa convention, True = attend) become 0 / float32 min, as eager masks are; float masks are
    already additive and are only sliced and upcast.
    """
    b = idx.shape[0]
    if attention_mask is None:
        allowed = _allowed_from_none(idx, kv_len, causal_if_none)
    else:
        if attention_mask.dim() != 4:
            raise VRHError(f"attention capture expects a 4D attention mask, got shape {tuple(attention_mask.shape)}")
        m = attention_mask[..., :kv_len].expand(b, -1, -1, -1)
        rows = _gather_rows(m, idx)
        if rows.dtype != torch.bool:
            return rows.float()
        allowed = rows
    if allowed is None:
        return None
    zero = torch.zeros((), dtype=torch.float32, device=idx.device)
    return torch.where(allowed, zero, torch.finfo(torch.float32).min)


def row_probs(query: torch.Tensor, key: torch.Tensor, idx: torch.Tensor, scaling: float,
              softcap: float | None, add_mask: torch.Tensor | None) -> torch.Tensor:
    """Float32 attention probabilities (b, heads, Q, T) of the rows idx (b, Q); GQA without repeating keys."""
    b, heads, _, d = query.shape
    kv_heads, kv_len = key.shape[1], key.shape[2]
    if heads % kv_heads:
        raise VRHError(f"{heads} query heads do not share {kv_heads} key/value heads evenly")
    rep = heads // kv_heads
    q = _gather_rows(query, idx).float().view(b, kv_heads, rep, idx.shape[1], d)
    k = key.float()[:, :, None]  # (b, kv, 1, T, d): broadcast over the heads of a group
    scores = torch.matmul(q, k.transpose(-1, -2)).view(b, heads, idx.shape[1], kv_len) * scaling
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if add_mask is not None:
        scores = scores + add_mask
    return torch.softmax(scores, dim=-1, dtype=torch.float32)


def reduce_rows(probs: torch.Tensor, key_sets: torch.Tensor, argmax: bool) -> RowStats:
    """Mass of each row on each key set (key_sets: (b, T, K) float 0/1), and each row's argmax key."""
    mass = torch.matmul(probs, key_sets[:, None])  # (b, h, Q, T) @ (b, 1, T, K) -> (b, h, Q, K)
    return RowStats(mass=mass, argmax=probs.argmax(-1) if argmax else None)
