"""The per-head view of an output projection: head h owns columns [h*d, (h+1)*d) of o_proj's input, so of its
weight's input dimension, of the `layers.L.head_out` site (vrh_lmms.model.backbone) and of anything laid out like
them (keep masks, fills, patch columns, gradient masks).

`per_head(t, d)` splits that dimension into (heads, d) as a view of `t`: reading or writing `per_head(t, d)[..., h, :]`
reads or writes head h's columns of `t` itself, the very elements the slice `h*d:(h+1)*d` names. Ablation, patching,
the dead-head check, discovery's means and the ranker's training use it; the slice is written here only.
"""

from __future__ import annotations

import torch


def columns(head: int, head_dim: int) -> slice:
    """Head `head`'s columns of a projection's input dimension."""
    return slice(head * head_dim, (head + 1) * head_dim)


def per_head(t: torch.Tensor, head_dim: int, dim: int = -1) -> torch.Tensor:
    """`t` with dimension `dim` (heads * head_dim wide) split into (heads, head_dim): a view, so writes land in `t`."""
    return t.unflatten(dim, (-1, head_dim))
