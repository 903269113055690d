"""Image-token layouts of LLaVA-1.5 (CLIP centre crop or pad-to-square), LLaVA-OneVision (AnyRes with
`anyres_max_N` pooling), Gemma 3 (squashed image, then pan-and-scan crops), Mistral 3 (Pixtral's rows), Llama 4
(tiles on a padded canvas, then a global tile): builders
`(w, h, extras) -> blocks` as in vrh_lmms.model.capture.tilings, reproducing transformers 5.25's processors and
modelling code.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model.capture.tilings import Block, Grid, _need, back, llava_next_anyres, spans


# --- LLaVA-1.5: CLIPImageProcessor resizes the shortest edge to `crop` and centre-crops a square (the parts of the
# long side outside the crop reach no token); LlavaImageProcessor(do_pad=True) pads to a centred square first.
def clip_square(w: int, h: int, extras: dict[str, Any]) -> list[Block]:
    crop, side = _need(extras, "crop_size", "base_side")
    crop, side = int(crop), int(side)
    if extras.get("do_pad"):  # LlavaImageProcessor.pad_to_square: paste at ((max - w) // 2, (max - h) // 2)
        big = max(w, h)
        cell = big / side
        return [Grid("image", spans(side, cell, -((big - w) // 2)), spans(side, cell, -((big - h) // 2)))]
    if not extras.get("do_center_crop", True):  # squashed onto the square
        return [Grid("image", spans(side, w / side), spans(side, h / side))]
    short = int(extras.get("shortest_edge") or crop)
    # image_transforms.get_resize_output_image_size(default_to_square=False): the long side truncated
    new_w, new_h = (short, int(short * h / w)) if w <= h else (int(short * w / h), short)
    left, top = int((new_w - crop) / 2.0), int((new_h - crop) / 2.0)  # TorchvisionBackend.center_crop
    cell = crop / side
    return [Grid("image", back(spans(side, cell, left), 0, new_w / w), back(spans(side, cell, top), 0, new_h / h))]


# --- LLaVA-OneVision: LLaVA-NeXT's base view (no newline) + unpadded AnyRes grid with a newline per row; when the
# unpadded grid holds more than 1.1^2 x max_num_patches tiles' worth of features, the model bilinearly pools it to
# int(rows // ratio) x int(cols // ratio) (modeling_llava_onevision.pack_image_features), each pooled feature then
# covering an equal share of the unpadded region.
def onevision_anyres(w: int, h: int, extras: dict[str, Any]) -> list[Block]:
    (base_side,) = _need(extras, "base_side")
    base, anyres = llava_next_anyres(w, h, {**extras, "vision_feature_select_strategy": "default"})
    aspect = str(extras.get("vision_aspect_ratio", "anyres_max_9"))
    max_patches = int(aspect.removeprefix("anyres_max_")) if aspect.startswith("anyres_max_") else None
    if max_patches is None:
        raise VRHError(f"LLaVA-OneVision vision_aspect_ratio {aspect!r} is not anyres_max_N")
    rows, cols = len(anyres.ys), len(anyres.xs)
    ratio = math.sqrt(rows * cols / (max_patches * int(base_side) ** 2))
    if ratio > 1.1:
        new_rows, new_cols = int(rows // ratio), int(cols // ratio)
        (x0, _), (_, x1) = anyres.xs[0], anyres.xs[-1]
        (y0, _), (_, y1) = anyres.ys[0], anyres.ys[-1]
        anyres = Grid("anyres", spans(new_cols, (x1 - x0) / new_cols, x0), spans(new_rows, (y1 - y0) / new_rows, y0),
                      newline=True)
    return [base, anyres]


# --- Gemma 3: the whole image squashed to one square grid; with pan-and-scan (Gemma3ImageProcessor
# .pan_and_scan_batched), then 2..max crops of the original image along its long side, each squashed alike.
def pan_and_scan_crops(w: int, h: int, min_crop: int, max_crops: int, min_ratio: float) -> list[tuple[int, int, int,
                                                                                                      int]]:
    """(x, y, crop_w, crop_h) of each crop, row-major; [] when pan-and-scan does not apply."""
    if w >= h:
        if w / h < min_ratio:
            return []
        n_w = min(max_crops, max(2, min(int(math.floor(w / min_crop)), int(math.floor(w / h + 0.5)))))
        n_h = 1
    else:
        if h / w < min_ratio:
            return []
        n_h = min(max_crops, max(2, min(int(math.floor(h / min_crop)), int(math.floor(h / w + 0.5)))))
        n_w = 1
    cw, ch = int(math.ceil(w / n_w)), int(math.ceil(h / n_h))
    if min(cw, ch) < min_crop:
        return []
    # tensor slicing clips the last crop to the image
    return [(x, y, min(cw, w - x), min(ch, h - y)) for y in range(0, ch * n_h, ch) for x in range(0, cw * n_w, cw)]


def gemma3_crops(w: int, h: int, extras: dict[str, Any]) -> list[Block]:
    """Pan-and-scan is a call-time option (lmms-eval's gemma3 backend never asks for it): whether crops were made is
    read from the placeholder count (`n_tokens`), their geometry from the processor's pan-and-scan settings."""
    (per_image,) = _need(extras, "tokens_per_image")
    side = math.isqrt(int(per_image))
    if side * side != int(per_image):
        raise VRHError(f"Gemma 3 tokens per image {per_image} is not a square")
    blocks: list[Block] = [Grid("image", spans(side, w / side), spans(side, h / side))]
    n_tokens = extras.get("n_tokens")
    if n_tokens is None and not extras.get("do_pan_and_scan") or n_tokens == per_image:
        return blocks
    min_crop, max_crops, min_ratio = _need(extras, "pan_and_scan_min_crop_size", "pan_and_scan_max_num_crops",
                                           "pan_and_scan_min_ratio_to_activate")
    crops = pan_and_scan_crops(w, h, int(min_crop), int(max_crops), float(min_ratio))
    if n_tokens is not None and (len(crops) + 1) * per_image != n_tokens:
        raise VRHError(f"Gemma 3 input has {n_tokens} image tokens; pan-and-scan at min crop {min_crop}, "
                       f"{max_crops} crops, ratio {min_ratio} gives {len(crops)} crops of {per_image}")
    blocks += [Grid("crop", spans(side, cw / side, x), spans(side, ch / side, y)) for x, y, cw, ch in crops]
    return blocks


# --- Mistral 3 (Pixtral): the image resized (aspect kept, longest edge capped) to whole (patch x merge) cells, one
# `[IMG]` per cell row-major; the `[IMG_BREAK]` / `[IMG_END]` closing each row are other ids, not placeholders.
def pixtral_rows(w: int, h: int, extras: dict[str, Any]) -> list[Block]:
    (resized_h, resized_w), cell = _need(extras, "image_size_hw", "token_px")
    rows, cols = int(resized_h) // int(cell), int(resized_w) // int(cell)
    return [Grid("image", spans(cols, w / cols), spans(rows, h / rows))]


# --- Llama 4: the image resized without distortion (upscaling capped at one tile) onto the best-fitting canvas of
# tiles, pasted top-left and padded right / bottom; tiles row-major (separators are other ids), then, when there
# are several, the whole image squashed to one tile. Canvas choice: transformers' own get_best_fit.
def llama4_tiles(w: int, h: int, extras: dict[str, Any]) -> list[Block]:
    # deferred: optional dependency (transformers releases before Llama 4 lack its image processor)
    from transformers.image_processing_utils import SizeDict
    from transformers.models.llama4.image_processing_llama4 import (
        find_supported_resolutions,
        get_best_fit,
        get_max_res_without_distortion,
    )

    tile, per_tile, max_patches = (int(v) for v in _need(extras, "tile_size", "tokens_per_tile", "max_patches"))
    side = math.isqrt(per_tile)
    to_max = bool(extras.get("resize_to_max_canvas", False))
    options = torch.tensor(find_supported_resolutions(max_patches, SizeDict(height=tile, width=tile)))
    th, tw = (int(v) for v in get_best_fit((h, w), options, resize_to_max_canvas=to_max))
    cap = (th, tw) if to_max else (min(max(h, tile), th), min(max(w, tile), tw))
    nh, nw = (max(int(v), 1) for v in get_max_res_without_distortion((h, w), cap))
    rows, cols = th // tile, tw // tile
    cell = tile / side
    blocks: list[Block] = [Grid("tile", back(spans(side, cell, c * tile), 0, nw / w),
                                back(spans(side, cell, r * tile), 0, nh / h)) for r in range(rows) for c in range(cols)]
    if rows * cols > 1:
        blocks.append(Grid("global", spans(side, w / side), spans(side, h / side)))
    return blocks
