"""Image-token layout of Gemma 4: a builder `(w, h, extras) -> blocks` as in vrh_lmms.model.capture.tilings,
reproducing transformers' Gemma4ImageProcessor and Gemma4VisionPooler.

The image is resized with its aspect ratio kept (no crop, no padding) to the largest size whose sides are whole
multiples of `pooling_kernel_size x patch_size` (48 px in the published checkpoints) within the patch budget
`max_soft_tokens x pooling_kernel_size^2`; the patches are average-pooled `k x k` into one soft token each, row-major
(`Gemma4VisionPooler._avg_pool_by_positions`: x // k + (width // k) * (y // k)). So an image gets a variable number of
tokens, one per cell of a rows x cols grid on the original image; `<|image>` / `<image|>` around them are other ids.
The resize arithmetic is transformers' own. Gemma 4's module only: transformers before Gemma 4 cannot import it, and
the layout table (tilings.BUILDERS) then refuses this one layout in one line when used, no other.
"""

from __future__ import annotations

from typing import Any

from transformers.models.gemma4.image_processing_gemma4 import get_aspect_ratio_preserving_size

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model.capture.tilings import Block, Grid, _need, spans


def gemma4_grid(w: int, h: int, extras: dict[str, Any]) -> list[Block]:
    """`max_soft_tokens` is a call-time option (lmms-eval's gemma4 backend passes its own, 280 by default)."""
    patch, pool, budget = (int(v) for v in _need(extras, "patch_size", "pooling_kernel_size", "max_soft_tokens"))
    try:
        rh, rw = get_aspect_ratio_preserving_size(height=h, width=w, patch_size=patch,
                                                  max_patches=budget * pool * pool, pooling_kernel_size=pool)
    except ValueError as exc:
        raise VRHError(f"Gemma 4 cannot resize a {w} x {h} image: {exc}") from None
    rows, cols = rh // (patch * pool), rw // (patch * pool)
    n_tokens = extras.get("n_tokens")
    if n_tokens is not None and n_tokens != rows * cols:
        raise VRHError(f"Gemma 4 input has {n_tokens} image tokens; a {w} x {h} image at patch {patch}, pooling "
                       f"{pool}, {budget} soft tokens at most gives {rows} x {cols}")
    return [Grid("image", spans(cols, w / cols), spans(rows, h / rows))]
