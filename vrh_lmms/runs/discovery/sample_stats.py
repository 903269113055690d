"""Reduce one sample's captured attention rows to the per-head quantities the design space scores."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from vrh_lmms.runs.discovery.scoring import QUERIES, RETRIEVAL


def reduce_sample(mass_box: torch.Tensor, argmax: torch.Tensor, rows: Sequence[int],
                  query_rows: dict[str, Sequence[int]], box_mask: torch.Tensor, seq_ids: torch.Tensor,
                  needle_mask: torch.Tensor) -> dict[str, np.ndarray]:
    """Per-head quantities of one sample.

    mass_box, argmax: (layers, heads, R) for the captured rows `rows` (sequence positions, in that order).
    query_rows: query set name -> the sequence positions that belong to it (a subset of `rows`).
    box_mask: (T,) bool, the box's image tokens; seq_ids: (T,) token ids of the full sequence;
    needle_mask: (T,) bool, where a copied token may come from (the prompt) for the retrieval score.
    A query set with no rows gives NaN, which aggregation skips.
    """
    layers, heads, _ = mass_box.shape
    col = {int(p): i for i, p in enumerate(rows)}
    argmax = argmax.long()
    in_box = box_mask[argmax.clamp(min=0)] & (argmax >= 0)
    out: dict[str, np.ndarray] = {}
    nan = np.full((layers, heads), np.nan)
    for q in QUERIES:
        idx = [col[int(p)] for p in query_rows.get(q, [])]
        if not idx:
            out[f"{q}_sum"], out[f"{q}_argmax"] = nan.copy(), nan.copy()
            continue
        sel = torch.tensor(idx, dtype=torch.long)
        out[f"{q}_sum"] = mass_box[:, :, sel].double().mean(-1).numpy()
        out[f"{q}_argmax"] = in_box[:, :, sel].double().mean(-1).numpy()
    # Retrieval (Wu et al.): the head's top-1 key holds the very token this row emits, inside the needle.
    idx = [col[int(p)] for p in query_rows.get("out", [])]
    if idx:
        sel = torch.tensor(idx, dtype=torch.long)
        emitted = seq_ids[torch.tensor([int(rows[i]) + 1 for i in idx], dtype=torch.long)]
        top = argmax[:, :, sel].clamp(min=0)
        copied = (seq_ids[top] == emitted.view(1, 1, -1)) & needle_mask[top] & (argmax[:, :, sel] >= 0)
        out[RETRIEVAL] = copied.double().mean(-1).numpy()
    else:
        out[RETRIEVAL] = nan.copy()
    return out
