"""Image-token layout of Molmo 2: a builder `(w, h, extras) -> blocks` as in vrh_lmms.model.capture.tilings,
reproducing transformers 5.25's Molmo2ImageProcessor / Molmo2Processor.

Each image becomes two views, each a grid of pooled patches written row by row as `<im_patch>` tokens (the `<im_col>`
closing each row and the view's start / end tokens are other ids, not placeholders):
- `global`: the whole image squashed to one crop (`size`, 378 px in Molmo2-8B), its patch grid pooled
  `pooling_size` (2 x 2);
- `crops`: the image squashed onto a canvas of `tiling_h x tiling_w` overlapping crops (each crop's window is the crop
  less `overlap_margins` patches on each side; the canvas adds one margin on each side), the tiling chosen by
  `select_tiling` among at most `max_crops` crops; after the overlaps are dropped, the crops' patches are exactly the
  canvas's patch grid, pooled `pooling_size` like the global view.
Pooling pads a patch grid whose side is not a multiple of the window with -1 (half before, rounded down, the rest
after); a pooled token covers only its real patches, so its cell is the union of those patches.
"""

from __future__ import annotations

from typing import Any

from vrh_lmms.model.capture.tilings import Block, Grid, Span, _need


def pooled_spans(n_patches: int, pool: int, patch_px: float) -> tuple[Span, ...]:
    """Pixel spans of the pooled cells along one axis of an `n_patches` grid (arange_for_pooling's padding)."""
    pad = pool * -(-n_patches // pool) - n_patches
    first = -(pad // 2)
    out = []
    for start in range(first, n_patches, pool):
        lo, hi = max(start, 0), min(start + pool, n_patches)
        out.append((lo * patch_px, hi * patch_px))
    return tuple(out)


def molmo2_views(w: int, h: int, extras: dict[str, Any]) -> list[Block]:
    # deferred: optional dependency (transformers releases before Molmo 2 lack it)
    from transformers.models.molmo2.image_processing_molmo2 import compute_crop_geometry

    crop, patch, max_crops = (int(v) for v in _need(extras, "crop_size", "patch_size", "max_crops"))
    pool_h, pool_w = (int(v) for v in _need(extras, "pooling_size")[0])
    margins = [int(v) for v in _need(extras, "overlap_margins")[0]]
    side = crop // patch
    low = Grid("global", pooled_spans(side, pool_w, w / side), pooled_spans(side, pool_h, h / side))
    _, _, canvas_h, canvas_w = compute_crop_geometry(h, w, max_crops, margins, crop, patch)
    rows, cols = canvas_h // patch, canvas_w // patch
    high = Grid("crops", pooled_spans(cols, pool_w, w / cols), pooled_spans(rows, pool_h, h / rows))
    return [low, high]
