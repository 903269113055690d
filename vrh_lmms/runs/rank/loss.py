"""The ranking objective on retrieval-head attention ("A Broader Look into MLLM's Retrieval Heads"
trains the retrieval heads' attention with a ranking objective; its summary states no formula, so this is ours).

Per query: the chosen heads' attention row from the ranker's query row (the last prompt token,
vrh_lmms.runs.rank.capture) over the whole sequence; a candidate's mass is that row summed over the candidate's image
tokens, averaged over the chosen heads (the ranker's own score, raw). The loss is a listwise softmax cross-entropy
over candidates: -log softmax(mass / tau)[gold]. Masses lie in [0, 1], so at tau = 1 even all attention on the gold
of 4 candidates leaves it only e/(e+3) = 48% of the softmax and the gradient stays weak; the default tau = 0.1 lets
the loss approach 0 when the heads put their candidate attention on the gold one.

Differentiable attention: the rows are rebuilt from the layer's own (rotary-embedded) queries and keys inside the
registered attention function of vrh_lmms.model.capture.attention (an `attn_rows` observer on the chosen layers only),
so the forward keeps sdpa for every layer's output and only the chosen heads' one row is recomputed eagerly, in float32
or the model's dtype when wider (float64 in the gradient test). The gradient reaches the chosen heads' q_proj rows
and their layer's k_proj, and everything below that layer; nothing above it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import HeadRef
from vrh_lmms.model.backbone import ATTN_ROWS, Hook, site_name

DEFAULT_TEMPERATURE = 0.1


def candidate_masses(rows: torch.Tensor, spans: Sequence[torch.Tensor]) -> torch.Tensor:
    """(n_candidates,) mass of each candidate: rows (heads, T) attention probabilities summed over each span's
    positions, averaged over the heads."""
    if rows.dim() != 2 or rows.shape[0] == 0:
        raise VRHError(f"attention rows must be (heads, positions) with at least one head, got {tuple(rows.shape)}")
    if len(spans) < 2:
        raise VRHError(f"a ranking needs at least 2 candidate spans, got {len(spans)}")
    per_head = torch.stack([rows[:, torch.as_tensor(s, dtype=torch.long, device=rows.device)].sum(-1)
                            for s in spans], dim=-1)
    return per_head.mean(0)


def listwise_loss(masses: torch.Tensor, gold: int, temperature: float = DEFAULT_TEMPERATURE) -> torch.Tensor:
    """-log softmax(masses / temperature)[gold]: the listwise cross-entropy of the gold candidate."""
    if not temperature > 0:
        raise VRHError(f"--temperature must be > 0, got {temperature}")
    if not 0 <= int(gold) < masses.shape[-1]:
        raise VRHError(f"gold candidate {gold} outside the {masses.shape[-1]} candidates")
    return -torch.log_softmax(masses / temperature, dim=-1)[..., int(gold)]


class RowGrabber:
    """An `attn_rows` observer: for its layers, the chosen heads' probability row at `position`, with gradient."""

    def __init__(self, heads: Sequence[HeadRef], position: int) -> None:
        self.by_layer: dict[int, list[int]] = {}
        for h in heads:
            self.by_layer.setdefault(int(h.layer), []).append(int(h.head))
        self.order = [(int(h.layer), int(h.head)) for h in heads]
        self.position = int(position)
        self.rows: dict[tuple[int, int], torch.Tensor] = {}

    def observe(self, layer: int, module: nn.Module, query: torch.Tensor, key: torch.Tensor,
                attention_mask: torch.Tensor | None, kwargs: dict) -> None:
        # deferred: keeps `vrh-lmms rank-train --help` free of transformers
        from vrh_lmms.model.capture.rows import mask_rows

        heads = self.by_layer.get(layer)
        if not heads:
            return
        b, n_heads, q_len, d = query.shape
        kv_heads, kv_len = key.shape[1], key.shape[2]
        if b != 1:
            raise VRHError(f"the ranking loss reads one sequence per forward, got a batch of {b}")
        if kv_len != q_len or not 0 <= self.position < q_len:
            raise VRHError(f"layer {layer}: query row {self.position} outside a {q_len}-token forward without cache")
        dtype = torch.promote_types(query.dtype, torch.float32)
        idx = torch.tensor([[self.position]], device=query.device)
        scaling = kwargs.get("scaling")
        scaling = d**-0.5 if scaling is None else scaling
        rep = n_heads // kv_heads
        hi = torch.tensor(heads, device=query.device)
        q = query[0, hi, self.position].to(dtype)  # (n, d)
        k = key[0, hi // rep].to(dtype)  # (n, T, d)
        scores = torch.einsum("nd,ntd->nt", q, k) * scaling
        if kwargs.get("softcap") is not None:
            scores = torch.tanh(scores / kwargs["softcap"]) * kwargs["softcap"]
        add = mask_rows(attention_mask, idx, kv_len, causal_if_none=q_len > 1)
        if add is not None:
            add = add[0, :, 0]  # (1|h, T)
            scores = scores + (add if add.shape[0] == 1 else add[hi]).to(dtype)
        probs = torch.softmax(scores, dim=-1)
        for i, h in enumerate(heads):
            self.rows[(layer, h)] = probs[i]

    def stacked(self) -> torch.Tensor:
        """(heads, T) in the order the heads were given; refuses a head whose layer did not run."""
        missing = [f"L{la}H{h}" for la, h in self.order if (la, h) not in self.rows]
        if missing:
            raise VRHError(f"no attention row captured for {', '.join(missing)}")
        return torch.stack([self.rows[key] for key in self.order])


@contextmanager
def head_rows(model: nn.Module, heads: Sequence[HeadRef], position: int) -> Iterator[RowGrabber]:
    """Within the scope, a forward of `model` leaves the chosen heads' differentiable attention row at `position`
    in the yielded grabber (sdpa output unchanged; the text stack's attention implementation is restored on exit)."""
    # deferred: keeps `vrh-lmms rank-train --help` free of transformers
    from vrh_lmms.model.capture.attention import TextAttentionSwitch

    if not heads:
        raise VRHError("the ranking loss needs at least one head")
    switch = TextAttentionSwitch(model, "sdpa")
    grabber = RowGrabber(heads, position)
    installed = switch.decoder.install([Hook(site_name(la, ATTN_ROWS), grabber, "rows")
                                        for la in sorted(grabber.by_layer)])
    try:
        switch.on()
        yield grabber
    finally:
        installed.remove()
        switch.off()
