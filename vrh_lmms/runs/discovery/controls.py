"""Sharper discovery scores: a content-free query baseline, each head's image attention mass, and score sparsity.

Content-free query (as for document retrieval heads, arXiv 2605.27243): the same image and prompt with "N/A" in
place of the referring expression, teacher-forced on the same answer. A head that looks at the box region whatever
it is asked (position or saliency, not retrieval) scores as high there; subtracting that score per sample keeps
what the expression adds. The splice keeps every other token, so the chat template and image tokens are the
backend's own; only the expression's tokens change (image positions shift when the expression precedes them).

Image mass: the attention the answer-emitting rows pay to all image tokens, per head: what the image-matched
control of sweeps matches on (heads that look at the image as much as the top heads, but not at the box).

Sparsity: the smallest share of heads that holds half of all (positive) score mass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from vrh_lmms.runs.discovery.queries import expression_rows

NULL_EXPRESSION = "N/A"
NULL_PREFIX = "null_"
IMAGE_MASS = "out_image_sum"  # per sample: mean over the `out` rows of the mass on all image tokens


def content_free_prompt(tensors: dict[str, torch.Tensor], tokenizer, pieces: Sequence[str], expression: str,
                        ) -> dict[str, torch.Tensor] | None:
    """The generate inputs with the expression's tokens replaced by "N/A" (None when the prompt does not spell
    the expression). Per-token inputs of the prompt (attention mask, token types) take the value the expression's
    first token had."""
    ids = tensors["input_ids"]
    prompt_len = ids.shape[1]
    rows = expression_rows(pieces, expression, limit=prompt_len)
    if not rows:
        return None
    start, stop = rows[0], rows[-1] + 1
    span = tokenizer.decode(ids[0, start:stop].tolist(), skip_special_tokens=False)
    lead = span[:len(span) - len(span.lstrip())]
    new = tokenizer(lead + NULL_EXPRESSION, add_special_tokens=False)["input_ids"]
    out: dict[str, torch.Tensor] = {}
    for key, value in tensors.items():
        if value.dim() == 2 and value.shape == (1, prompt_len):
            if key == "input_ids":
                middle = torch.tensor([new], dtype=value.dtype, device=value.device)
            else:
                middle = value[:, start:start + 1].expand(1, len(new))
            out[key] = torch.cat([value[:, :start], middle, value[:, stop:]], dim=1)
        else:
            out[key] = value
    return out


# Localization Heads' per-sample statistics are an entropy and a selection input, not masses on the box: subtracting
# the content-free query's would mean nothing, so they pass through uncorrected (vrh_lmms.runs.discovery.localization).
UNCORRECTED = frozenset({"loc_entropy", "loc_image_sum"})


def corrected_stats(stats: Sequence[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """Per sample, every scored quantity minus its content-free counterpart (NaN where a sample has none)."""
    out = []
    for s in stats:
        row = {}
        for key, value in s.items():
            if key.startswith(NULL_PREFIX) or key == IMAGE_MASS:
                continue
            if key in UNCORRECTED:  # not a mass: kept as measured on the real query
                row[key] = value
                continue
            null = s.get(NULL_PREFIX + key)
            row[key] = value - null if null is not None else np.full_like(value, np.nan)
        out.append(row)
    return out


def image_mass(stats: Sequence[dict[str, np.ndarray]]) -> np.ndarray | None:
    """(layers, heads) mean image mass over samples, or None when some sample lacks it (older parts)."""
    if not stats or any(IMAGE_MASS not in s for s in stats):
        return None
    stacked = np.stack([s[IMAGE_MASS] for s in stats])
    if np.isnan(stacked).all():
        return None
    return np.nanmean(stacked, axis=0)


def half_mass_share(scores: np.ndarray) -> dict[str, Any]:
    """Smallest number (and share) of heads whose scores sum to half of all positive score mass."""
    flat = np.nan_to_num(np.asarray(scores, dtype=float).ravel(), nan=0.0)
    positive = np.clip(flat, 0.0, None)
    total = float(positive.sum())
    out: dict[str, Any] = {"heads": int(flat.size), "negative_scores": int((flat < 0).sum())}
    if total <= 0:
        return out | {"half_mass_heads": None, "half_mass_share": None}
    cumulative = np.cumsum(np.sort(positive)[::-1])
    n = int(np.searchsorted(cumulative, 0.5 * total, side="left")) + 1
    return out | {"half_mass_heads": n, "half_mass_share": n / flat.size}


def heads_file_extras(parts, primary_scores: np.ndarray, cell: str, null_query: bool) -> dict[str, Any]:
    """Heads-file fields beside the scores: sparsity of the primary cell, the image mass per head, and how the
    content-free query was used (docs/contracts.md)."""
    stats = [p.stats for p in parts]
    out: dict[str, Any] = {"sparsity": {"cell": cell, **half_mass_share(primary_scores)}}
    mass = image_mass(stats)
    if mass is not None:
        out["image_mass"] = {"query": "out", "scores": np.nan_to_num(mass, nan=0.0).round(8).tolist()}
    if null_query:
        missing = sum(1 for p in parts if not p.meta.get("null_query"))
        out["null_query"] = {"expression": NULL_EXPRESSION, "subtracted": True,
                             "samples_without_expression": missing}
    return out
