"""One teacher-forced forward -> every head's attention from chosen query rows to each image token.

The forward is discovery's (vrh_lmms.model.capture.teacher_forced.teacher_forced_inputs on the backend's own generate
inputs) and so is the capture (vrh_lmms.model.capture.attention with one key set per image token: the mass of a
one-token key set is that token's attention probability). Rows:
- "answer": the rows that emit the model's answer tokens (discovery's Q_out);
- "prompt": the referring expression's own tokens in the prompt (discovery's Q_in);
- "last": the last prompt row, the one that emits the first answer token (the row Localization Heads read).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model.capture.attention import CapturePlan, capture_attention
from vrh_lmms.model.capture.layouts import ImageTokenMap
from vrh_lmms.runs.discovery.queries import expression_rows, out_rows

ROWS = ("answer", "prompt", "last")


def query_rows(kind: str, prompt_len: int, n_answer: int, pieces: Sequence[str], expression: str) -> list[int]:
    """Sequence positions of the query rows of `kind` (ROWS) in prompt + answer."""
    if kind == "answer":
        return out_rows(prompt_len, n_answer)
    if kind == "prompt":
        return expression_rows(pieces, expression, limit=prompt_len) if expression else []
    if kind == "last":
        return [prompt_len - 1]
    raise VRHError(f"unknown query rows {kind!r}; use one of {', '.join(ROWS)}")


def image_attention(model: torch.nn.Module, inputs: dict[str, torch.Tensor], rows: Sequence[int],
                    tmap: ImageTokenMap, base: str | None = None) -> np.ndarray:
    """(layers, heads, n_tokens) float32: each head's attention probability on each image token of `tmap`
    (ImageTokenMap.positions order), averaged over the query `rows` of one forward of `model` on `inputs`."""
    if not rows:
        raise VRHError("no query rows to read attention from (empty answer, or the expression is not in the prompt)")
    seq_len = int(inputs["input_ids"].shape[1])
    positions = tmap.positions.tolist()
    if not positions:
        raise VRHError("the image has no tokens with a cell; nothing to map")
    if max(rows) < min(positions):
        raise VRHError(f"the query rows (positions {min(rows)}-{max(rows)}) all come before the image (from position "
                       f"{min(positions)}): causal attention cannot reach it from them; use rows after the image "
                       f"(--rows answer or last)")
    keys = {}
    for i, pos in enumerate(positions):
        mask = torch.zeros(1, seq_len, dtype=torch.bool)
        mask[0, pos] = True
        keys[str(i)] = mask
    plan = CapturePlan(query_positions=torch.tensor([list(rows)], dtype=torch.long), key_sets=keys, argmax=False)
    with torch.no_grad(), capture_attention(model, plan, base=base) as handle:
        model(**inputs)
    mass = handle.result().mass
    stacked = torch.stack([mass[str(i)][0] for i in range(len(positions))], dim=-1)  # (L, H, Q, n)
    return stacked.double().mean(dim=2).float().cpu().numpy()
