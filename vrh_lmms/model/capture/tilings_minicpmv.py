"""Image-token layout of MiniCPM-V 4.6: a builder `(w, h, extras) -> blocks` as in vrh_lmms.model.capture.tilings,
reproducing transformers 5.25's MiniCPMV4_6ImageProcessor / MiniCPMV4_6Processor.

An image becomes the source view, then (slice mode, an image larger than `scale_resolution`^2) the slices:
- `global` (the source view): the image resized (aspect kept, about `scale_resolution`^2 pixels; upscaled when it
  is not sliced), sides rounded to multiples of `patch x 4` (16x downsampling: the 2 x 2 window merger inside the
  tower, then the 2 x 2 MLP merger; `patch x 2` in 4x mode), one token per merged cell, row-major;
- `slice`: the image resized to the refined size (whole slices of the grid `get_sliced_grid` picks), cut into
  `rows x cols` equal slices, each a grid of merged cells like the source view; slices row-major.
`<image>` / `</image>`, `<slice>` / `</slice>`, the row newlines and the `<image_id>` tag are other ids. The sizes come
from the image processor's own `find_best_resize` / `get_sliced_grid` / `get_refine_size`.
"""

from __future__ import annotations

from typing import Any

from vrh_lmms.model.capture.tilings import Block, Grid, _need, spans


def minicpmv_slices(w: int, h: int, extras: dict[str, Any]) -> list[Block]:
    # deferred: optional dependency (transformers releases before MiniCPM-V 4.6 lack it)
    from transformers import MiniCPMV4_6ImageProcessor

    scale, patch, max_slices = (int(v) for v in _need(extras, "scale_resolution", "patch_size", "max_slice_nums"))
    mode = str(extras.get("downsample_mode", "16x"))
    cell = patch * (2 if mode == "4x" else 4)
    ip = MiniCPMV4_6ImageProcessor()
    grid = ip.get_sliced_grid((h, w), max_slices, scale) if extras.get("slice_mode", True) else None
    sh, sw = ip.find_best_resize((h, w), scale, patch, downsample_mode=mode, allow_upscale=grid is None)
    blocks: list[Block] = [Grid("global", spans(sw // cell, w / (sw // cell)), spans(sh // cell, h / (sh // cell)))]
    if grid is None:
        return blocks
    rows, cols = grid
    rh, rw = ip.get_refine_size((h, w), grid, scale, patch, downsample_mode=mode, allow_upscale=True)
    per_rows, per_cols = rh // rows // cell, rw // cols // cell
    sx, sy = w / cols, h / rows  # each slice covers an equal share of the (squashed) image
    for r in range(rows):
        for c in range(cols):
            blocks.append(Grid("slice", spans(per_cols, sx / per_cols, c * sx), spans(per_rows, sy / per_rows, r * sy)))
    return blocks
