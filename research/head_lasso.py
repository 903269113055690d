"""Whole-head group lasso: an L2 norm per attention head over everything that head owns, applied as a proximal step.

Why: in a 7B VLM most heads are idle on any one task, so random heads cost nothing, while a tiny model trained on
few tasks enlists every free head (p5 seed 0 reads the referent through ~25 heads of layers 3-5). The penalty drives
heads a task does not need to zero output *and* a flat attention pattern (q and k shrink too), so an idle head is
idle for the attention scorer as well as for ablation.

Why proximal: as a loss term under Adam, the penalty's gradient is rescaled by each weight's gradient noise and did
nothing (p10: weight 1e-3, head norms 7.4 -> 7.0 after 1500 steps). Group soft-thresholding after each optimizer
step, w <- w * max(0, 1 - lr * weight / ||w||), shrinks every head's norm by lr * weight per step whatever Adam does,
so a head whose task gradient does not push back reaches exactly zero (as decoupled weight decay is to L2).

The lasso ran in designs p11, p12 and p14 (docs/demo-model-experiments.md) and did not ship: its outcome hung on its
weight, and the shipped design prunes by importance instead (research/demo_model/head_prune.py). `LassoDesign` plugs it
into the package's trainer as a phase hook, so those designs still train (`python -m research.train --design p11`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch

from research.demo_model.model_heads import group_norms, head_groups, head_params
from research.demo_model.train import Design


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


class LassoHook:
    """The trainer's phase hook for the lasso: the proximal step after every optimizer step, idle heads in each
    record, the phase's starting median head norm (the idle threshold's reference) in the resume state."""

    def __init__(self, model, weight: float, layers: tuple, steps: tuple):
        self.groups = head_groups(model, layers, "head_lasso_layers")
        self.weight, self.steps = weight, tuple(steps)
        self.start_median = float("nan")

    def begin(self, saved: dict[str, Any] | None) -> None:
        if saved is not None:  # the reference is the phase's starting median, not the resumed weights'
            self.start_median = saved["lasso_start"]
            return
        with torch.no_grad():
            self.start_median = float(group_norms(self.groups).median())

    def after_step(self, step: int, backbone_lr: float) -> None:
        # proximal: shrink each head's norm by the backbone's current rate x the lasso weight
        prox_step(self.groups, lasso_weight(self.weight, step, *self.steps) * backbone_lr)

    def figures(self) -> dict[str, Any]:
        with torch.no_grad():  # heads below a tenth of the phase's starting median norm
            return {"lasso_idle_heads": int((group_norms(self.groups) < 0.1 * self.start_median).sum())}

    def state(self) -> dict[str, Any]:
        return {"lasso_start": self.start_median}


@dataclass(frozen=True)
class LassoDesign(Design):
    """A design with a whole-head group lasso on these text layers (empty: all), in the joint phase only (text
    pretraining is where the heads' jobs form), ramped in from joint step head_lasso_steps[0] to full weight at
    head_lasso_steps[1] (each head's norm shrinks by the backbone's rate x head_lasso per step)."""

    head_lasso: float = 0.0
    head_lasso_layers: tuple = ()
    head_lasso_steps: tuple = (0, 0)

    def phase_hooks(self, model, phase_kind: str) -> list:
        hooks = list(super().phase_hooks(model, phase_kind))
        if self.head_lasso > 0 and phase_kind == "joint":  # its ramp counts joint steps
            hooks.append(LassoHook(model, self.head_lasso, self.head_lasso_layers, self.head_lasso_steps))
        return hooks

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LassoDesign":
        design = super().from_dict(data)
        return cls(**{f.name: getattr(design, f.name) for f in fields(design)}
                   | {k: tuple(getattr(design, k)) for k in ("head_lasso_layers", "head_lasso_steps")})


def with_lasso(design: Design, **lasso: Any) -> LassoDesign:
    """`design` with the lasso settings `lasso` (head_lasso, head_lasso_layers, head_lasso_steps) and any other
    field overrides (name=...)."""
    return LassoDesign(**{f.name: getattr(design, f.name) for f in fields(design)} | lasso)
