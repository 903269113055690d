"""Importance-based head pruning during training (Michel et al. 2019, "Are Sixteen Heads Really Better than One?").

Why: in a 7B VLM most heads are idle on any one task, so random heads cost nothing; a tiny model enlists every free
head (p5 seed 0 reads the referent through ~25 heads of layers 3-5). A proximal lasso (research/head_lasso.py) makes
unneeded heads idle, but its outcome hangs on one weight: 10 pruned nothing, 25 pruned every head of layers 3-5
(p11, p12, p14). Pruning by importance fixes the outcome instead: over a window of steps the chosen layers lose their
least important heads, one at a time, until `keep` are left, and the survivors are the heads some task (text or
visual, every training batch counts) needs most.

Importance of head h is the first-order estimate of the loss change when the head is removed, |dL/d xi_h| for a gate
xi_h = 1 on the head's output (before `o_proj`), per sample, averaged over the batch and smoothed over steps (an
exponential moving average). A pruned head's parameters (q, k, v rows and biases, o_proj columns:
`model_heads.head_groups`) are set to zero after every optimizer step, so it writes nothing and attends uniformly,
as an ablated head does, and the saved checkpoint holds it that way.
"""

from __future__ import annotations

from typing import Any

import torch

from research.demo_model.model_heads import head_groups, head_params
from vrh_lmms.base.heads.geometry import HeadRef, parse_head
from vrh_lmms.model.backbone import HEAD_OUT, Hook, locate_decoder, site_name

# steps of importance measurement before the first head is pruned, and the moving average's decay per step
WINDOW = 250
DECAY = 0.99


def pruned_count(step: int, total: int, keep: int, start: int, end: int) -> int:
    """Heads pruned once step `step` is done: none before `start`, then linearly more up to `total - keep` at `end`."""
    if step < start:
        return 0
    share = min(1.0, (step - start + 1) / max(1, end - start + 1))
    return round((total - keep) * share)


class HeadPruner:
    """Measures head importance in the chosen text layers and prunes the least important on a schedule.

    Call `measure(step)` before the forward pass, `update()` after the backward pass and `prune(step)` after the
    optimizer step; `state()` / `load()` carry the importance and the pruned set across a resumed run.
    """

    def __init__(self, model, layers: tuple, keep: int, steps: tuple[int, int], survivors: tuple = ()):
        self.groups = head_groups(model, layers, "head_prune_layers")
        if not 0 <= keep <= len(self.groups):
            raise ValueError(f"head_prune_keep {keep} must lie in 0..{len(self.groups)} (heads of the pruned layers)")
        refs = [HeadRef(layer, head) for layer, head, *_ in self.groups]
        wanted = {parse_head(token) for token in survivors}
        unknown = [str(h) for h in sorted(wanted - set(refs))]
        if unknown or (survivors and len(wanted) != keep):
            raise ValueError(f"head_prune_survivors {list(survivors)} must name exactly head_prune_keep = {keep} "
                             f"heads of the pruned layers (not among them: {unknown or 'none'})")
        self.protected = torch.tensor([ref in wanted for ref in refs], dtype=torch.bool)
        start, end = steps
        if not 0 <= start <= end:
            raise ValueError(f"head_prune_steps {steps} must be (start, end) with 0 <= start <= end")
        self.keep, self.start, self.end = keep, start, end
        self.importance = torch.zeros(len(self.groups), dtype=torch.float64)
        self.alive = torch.ones(len(self.groups), dtype=torch.bool)
        self._measuring = False
        self._gates: dict[int, torch.Tensor] = {}
        self._offset: dict[int, int] = {}
        hooks = []
        for layer_index, _, proj, _ in self.groups:
            if layer_index in self._offset:
                continue
            self._offset[layer_index] = [g[0] for g in self.groups].index(layer_index)
            n_heads = proj.o.in_features // proj.head_dim

            def gate_heads(x, layer_index=layer_index, n_heads=n_heads, hd=proj.head_dim):
                if not self._measuring:
                    return None
                gate = torch.ones(x.shape[0], 1, n_heads, 1, dtype=x.dtype, requires_grad=True)
                self._gates[layer_index] = gate
                return (x.view(*x.shape[:2], n_heads, hd) * gate).view_as(x)

            hooks.append(Hook(site_name(layer_index, HEAD_OUT), gate_heads))
        locate_decoder(model).install(hooks)  # for the model's life: the gates measure only while asked to

    def measure(self, step: int) -> None:
        """Gate the heads' outputs on this step's forward pass if the step lies in the measuring window."""
        self._measuring = self.start - WINDOW <= step < self.end and int((~self.alive).sum()) < self.target(self.end)
        self._gates.clear()

    def update(self) -> None:
        """Fold this step's per-sample |dL/d gate| (mean over samples) into the moving average."""
        if not self._measuring:
            return
        current = torch.zeros_like(self.importance)
        for layer_index, gate in self._gates.items():
            if gate.grad is None:
                continue
            per_head = gate.grad.detach().abs().mean(dim=(0, 1, 3)).double()
            current[self._offset[layer_index]:self._offset[layer_index] + per_head.numel()] = per_head
        self.importance.mul_(DECAY).add_((1 - DECAY) * current)
        self._gates.clear()
        self._measuring = False

    def target(self, step: int) -> int:
        return pruned_count(step, len(self.groups), self.keep, self.start, self.end)

    @torch.no_grad()
    def prune(self, step: int) -> list[tuple[int, int]]:
        """Prune the least important live heads until the schedule's count is reached, then hold every pruned head
        at zero (the optimizer moved it this step). Returns the heads pruned at this step."""
        newly: list[tuple[int, int]] = []
        need = self.target(step) - int((~self.alive).sum())
        if need > 0:
            ranked = sorted((float(self.importance[i]), i) for i in range(len(self.groups))
                            if self.alive[i] and not self.protected[i])
            for _, i in ranked[:need]:
                self.alive[i] = False
                newly.append(self.groups[i][:2])
        for i in (~self.alive).nonzero().flatten().tolist():
            _, _, proj, rows = self.groups[i]
            for part in head_params(proj, rows):
                part.zero_()
        return newly

    def pruned(self) -> list[tuple[int, int]]:
        return [self.groups[i][:2] for i in (~self.alive).nonzero().flatten().tolist()]

    def state(self) -> dict[str, Any]:
        return {"importance": self.importance.clone(), "alive": self.alive.clone()}

    def load(self, state: dict[str, Any]) -> None:
        self.importance = state["importance"].clone()
        self.alive = state["alive"].clone()
