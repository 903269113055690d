"""Whole-head group lasso: an L2 norm per attention head over everything that head owns, applied as a proximal step.

Why: in a 7B VLM most heads are idle on any one task, so random heads cost nothing, while a tiny model trained on
few tasks enlists every free head (p5 seed 0 reads the referent through ~25 heads of layers 3-5). The penalty drives
heads a task does not need to zero output *and* a flat attention pattern (q and k shrink too), so an idle head is
idle for the attention scorer as well as for ablation.

Why proximal: as a loss term under Adam, the penalty's gradient is rescaled by each weight's gradient noise and did
nothing (p10: weight 1e-3, head norms 7.4 -> 7.0 after 1500 steps). Group soft-thresholding after each optimizer
step, w <- w * max(0, 1 - lr * weight / ||w||), shrinks every head's norm by lr * weight per step whatever Adam does,
so a head whose task gradient does not push back reaches exactly zero (as decoupled weight decay is to L2).
"""

from __future__ import annotations

import torch


def head_groups(model, layers: tuple = (), option: str = "head_lasso_layers") -> list[tuple[int, int, object, slice]]:
    """(layer, head, its attention module, its rows) for every head of the chosen text layers (empty: all); `option`
    names the design option an out-of-range layer is reported under.

    Assumes one key/value head per query head (the demo's designs); grouped-query attention would share k and v.
    """
    from vrh_lmms.demo.probe import chosen_layers

    out = []
    for index, layer in chosen_layers(model, layers, option):
        attn = layer.self_attn
        hd, n_heads = attn.head_dim, attn.o_proj.in_features // attn.head_dim
        if attn.k_proj.out_features != n_heads * hd:
            raise ValueError(f"layer {index}: head lasso needs one key/value head per query head")
        out += [(index, h, attn, slice(h * hd, (h + 1) * hd)) for h in range(n_heads)]
    return out


def head_params(attn, rows: slice) -> list[torch.Tensor]:
    """What one head owns: its q, k, v rows and biases and its o_proj columns (fresh views, so autograd sees them)."""
    parts = [attn.o_proj.weight[:, rows]]
    for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
        parts.append(proj.weight[rows])
        if proj.bias is not None:
            parts.append(proj.bias[rows])
    return parts


def group_norms(groups) -> torch.Tensor:
    """One L2 norm per head group."""
    return torch.stack([torch.sqrt(sum((p.float() ** 2).sum() for p in head_params(attn, rows)))
                        for _, _, attn, rows in groups])


@torch.no_grad()
def prox_step(groups, shrink: float) -> None:
    """Group soft-thresholding: every head's parameters scaled by max(0, 1 - shrink / ||head||), in place."""
    if shrink <= 0 or not groups:
        return
    norms = group_norms(groups)
    for (_, _, attn, rows), norm in zip(groups, norms):
        factor = torch.clamp(1 - shrink / norm, min=0.0)  # a zero norm gives -inf, clamped to 0
        for part in head_params(attn, rows):
            part.mul_(factor.to(part.dtype))


def lasso_weight(design_weight: float, step: int, start: int, full: int) -> float:
    """0 before `start`, a linear ramp to `design_weight` at `full`, then constant."""
    if step < start:
        return 0.0
    if step >= full:
        return design_weight
    return design_weight * (step - start + 1) / (full - start + 1)
