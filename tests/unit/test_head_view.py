"""The per-head view of a projection (vrh_lmms.model.head_view) names the columns the slice h*d:(h+1)*d names."""

from __future__ import annotations

import torch

from vrh_lmms.model.head_view import columns, per_head


def test_the_view_is_head_h_columns_and_writes_land_in_the_tensor():
    heads, d = 3, 4
    w = torch.arange(2 * heads * d, dtype=torch.float32).reshape(2, heads * d)
    for h in range(heads):
        assert torch.equal(per_head(w, d)[:, h], w[:, h * d:(h + 1) * d])
        assert torch.equal(w[:, columns(h, d)], w[:, h * d:(h + 1) * d])
    x = torch.ones(5, 7, heads * d)  # (batch, positions, heads * d): the head_out site
    per_head(x, d)[..., 1, :] = 0
    assert x[..., d:2 * d].eq(0).all() and x[..., :d].eq(1).all() and x[..., 2 * d:].eq(1).all()
    per_head(w, d, dim=1)[:, 2] = -1
    assert w[:, 2 * d:].eq(-1).all() and w[:, :2 * d].ge(0).all()
