"""Per-family image-token geometry: the blocks of tokens an image becomes, in sequence order, in original pixels.

Each builder reproduces its processor's resize / crop / pad arithmetic (transformers 5.24 unless noted) and returns
`Grid` blocks (row-major tokens, each covering one cell; optionally one cell-less newline token after every row) and
`Gap` blocks (cell-less tokens such as view separators). Cells are given per column and per row as spans in
*original-image* pixels; `layouts.assemble` clips them to the image and pairs them with placeholder positions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from transformers.image_processing_utils import select_best_resolution
from transformers.models.got_ocr2.image_processing_got_ocr2 import get_optimal_tiled_canvas

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.families import FAMILIES, resolve_ref
from vrh_lmms.base.tables import DerivedTable
from vrh_lmms.model.capture.remote_logic import (
    INTERNVL_TILINGS,
    deepseek_vl2_best_resolution,
    internvl_remote_grid,
    phi4_hd_canvas,
)

Span = tuple[float, float]


@dataclass(frozen=True)
class Grid:
    view: str
    xs: tuple[Span, ...]  # per column: [x1, x2) in original pixels (may reach into padding; clipped later)
    ys: tuple[Span, ...]  # per row
    newline: bool = False  # a cell-less token ends every row

    @property
    def n_tokens(self) -> int:
        return len(self.ys) * (len(self.xs) + int(self.newline))


@dataclass(frozen=True)
class Gap:
    view: str = "separator"
    count: int = 1

    @property
    def n_tokens(self) -> int:
        return self.count


Block = Grid | Gap


def spans(n: int, cell: float, start: float = 0.0) -> tuple[Span, ...]:
    """n consecutive cells of width `cell` from `start`."""
    return tuple((start + i * cell, start + (i + 1) * cell) for i in range(n))


def back(s: tuple[Span, ...], offset: float, scale: float) -> tuple[Span, ...]:
    """Spans in a resized canvas -> original pixels: canvas = offset + original * scale."""
    return tuple(((a - offset) / scale, (b - offset) / scale) for a, b in s)


def _need(extras: dict[str, Any], *keys: str) -> list[Any]:
    missing = [k for k in keys if extras.get(k) is None]
    if missing:
        raise VRHError(f"layout extras lack {', '.join(missing)}")
    return [extras[k] for k in keys]


# --- Qwen2-VL style: one token per (merge x patch) cell of the smart-resized image (Qwen2.5-VL, Qwen3-VL, GLM-4V)
def merged_patch_grid(w: int, h: int, extras: dict[str, Any]) -> list[Block]:
    thw, patch, merge = _need(extras, "image_grid_thw", "patch_size", "merge_size")
    t, gh, gw = (int(v) for v in thw)
    if t != 1:
        raise VRHError(f"image_grid_thw {tuple(thw)} has t={t}: layouts cover single images, not videos")
    if gh % merge or gw % merge:
        raise VRHError(f"image_grid_thw {tuple(thw)} is not divisible by the merge size {merge}")
    cell = patch * merge
    sx, sy = gw * patch / w, gh * patch / h  # resized / original
    return [Grid("image", back(spans(gw // merge, cell), 0, sx), back(spans(gh // merge, cell), 0, sy))]


# --- InternVL: tiles row-major, thumbnail last when > 1 tile. Grid chosen by the HF processor (GotOcr2
# crop_to_patches, `tiling` "hf") or by the remote-code backends' own dynamic_preprocess ("sorted" / "set" order).
def internvl_grid(w: int, h: int, extras: dict[str, Any]) -> tuple[int, int]:
    """(cols, rows) of the tile grid, by the tiling the processor or backend really runs."""
    tile = int(extras["tile_size"])
    lo, hi = int(extras.get("min_patches", 1)), int(extras.get("max_patches", 12))
    tiling = extras.get("tiling", "hf")
    if tiling == "hf":
        return get_optimal_tiled_canvas((h, w), (tile, tile), lo, hi)
    if tiling not in INTERNVL_TILINGS:
        raise VRHError(f"unknown InternVL tiling {tiling!r}; use hf, {', '.join(INTERNVL_TILINGS)}")
    return internvl_remote_grid(w, h, tile, lo, hi, tiling)


def internvl_tiles(w: int, h: int, extras: dict[str, Any]) -> list[Block]:
    tile, per_tile = _need(extras, "tile_size", "tokens_per_tile")
    side = math.isqrt(int(per_tile))
    if side * side != per_tile:
        raise VRHError(f"InternVL tokens per tile {per_tile} is not a square")
    if extras.get("crop_to_patches", True):
        cols, rows = internvl_grid(w, h, {**extras, "tile_size": tile})
    else:
        cols = rows = 1
    # The image is squashed onto a (cols x rows) canvas of tiles, so each tile covers 1/cols x 1/rows of it.
    tw, th = w / cols, h / rows
    blocks: list[Block] = [Grid("tile", spans(side, tw / side, (i % cols) * tw),
                                spans(side, th / side, (i // cols) * th)) for i in range(rows * cols)]
    if rows * cols > 1 and extras.get("use_thumbnail", True):
        blocks.append(Grid("thumbnail", spans(side, w / side), spans(side, h / side)))
    return blocks


# --- LLaVA-NeXT: base grid of the squashed image, then the unpadded any-res grid with a newline ending each row
def llava_next_anyres(w: int, h: int, extras: dict[str, Any]) -> list[Block]:
    tile, base, pinpoints = _need(extras, "tile_size", "base_side", "grid_pinpoints")
    if extras.get("vision_feature_select_strategy", "default") != "default":
        raise VRHError("LLaVA-NeXT layout supports vision_feature_select_strategy='default' (CLS dropped) only")
    best_h, best_w = select_best_resolution((h, w), [list(p) for p in pinpoints])
    # image_processing_utils.get_patch_output_size + LlavaNextImageProcessor._get_padding_size (centred paste)
    if best_w / w < best_h / h:
        new_w, new_h = best_w, min(math.ceil(h * best_w / w), best_h)
    else:
        new_w, new_h = min(math.ceil(w * best_h / h), best_w), best_h
    paste_x, paste_y = (best_w - new_w) // 2, (best_h - new_h) // 2
    rows_f, cols_f = (best_h // tile) * base, (best_w // tile) * base
    # modeling_llava_next.unpad_image on the feature grid
    r0, c0, n_rows, n_cols = 0, 0, rows_f, cols_f
    if w / h > cols_f / rows_f:
        pad = (rows_f - int(round(h * (cols_f / w), 7))) // 2
        r0, n_rows = pad, rows_f - 2 * pad
    else:
        pad = (cols_f - int(round(w * (rows_f / h), 7))) // 2
        c0, n_cols = pad, cols_f - 2 * pad
    cell = tile / base  # canvas pixels per feature
    xs = back(spans(n_cols, cell, c0 * cell), paste_x, new_w / w)
    ys = back(spans(n_rows, cell, r0 * cell), paste_y, new_h / h)
    return [Grid("base", spans(base, w / base), spans(base, h / base)), Grid("anyres", xs, ys, newline=True)]


# --- PaliGemma: one fixed square grid on the squashed image
def square_grid(w: int, h: int, extras: dict[str, Any]) -> list[Block]:
    (n,) = _need(extras, "n_tokens")
    side = math.isqrt(int(n))
    if side * side != n:
        raise VRHError(f"{n} image tokens do not form a square grid")
    return [Grid("image", spans(side, w / side), spans(side, h / side))]


def deepseek_vl_geometry(w: int, h: int, size: int, min_size: int = 14) -> tuple[int, int, int, int]:
    """DeepseekVLImageProcessor: (new_w, new_h, x, y) of the resized image inside the padded square."""
    delta = size / max(h, w)
    new_h, new_w = max(round(h * delta), min_size), max(round(w * delta), min_size)
    dim = max(new_h, new_w)
    if new_w > new_h:
        return new_w, new_h, 0, (dim - new_h) // 2
    if new_h > new_w:
        return new_w, new_h, (dim - new_w) // 2, 0
    return new_w, new_h, 0, 0


# --- DeepSeek-VL (HF): longest side to `image_size`, centred pad to a square, one token per patch
def deepseek_vl_padded(w: int, h: int, extras: dict[str, Any]) -> list[Block]:
    size, n = _need(extras, "image_size", "n_tokens")
    side = math.isqrt(int(n))
    new_w, new_h, off_x, off_y = deepseek_vl_geometry(w, h, int(size), int(extras.get("min_size", 14)))
    cell = max(new_w, new_h) / side
    return [Grid("image", back(spans(side, cell), off_x, new_w / w), back(spans(side, cell), off_y, new_h / h))]


def _pil_pad_geometry(w: int, h: int, tw: int, th: int) -> tuple[int, int, int, int]:
    """PIL ImageOps.pad(image, (tw, th)) (centring 0.5): (new_w, new_h, x, y) of the pasted image."""
    if w / h == tw / th:
        return tw, th, 0, 0
    if w / h > tw / th:
        new_h = round(h / w * tw)
        return tw, new_h, 0, round((th - new_h) * 0.5)
    new_w = round(w / h * th)
    return new_w, th, round((tw - new_w) * 0.5), 0


def _vl2_tile_spans(n_tiles: int, size: int, per: int, tok_px: int, valid: int) -> tuple[Span, ...]:
    """Token spans along one axis of DeepSeek-VL2 tiles: tokens of tok_px, the ViT sees only `valid` px a tile."""
    out = []
    for t in range(n_tiles):
        for i in range(per):
            a = t * size + i * tok_px
            out.append((a, t * size + min((i + 1) * tok_px, valid)))
    return tuple(out)


# --- DeepSeek-VL2 (remote code, read not run): global 384 view with newlines, separator, tiled local view
def deepseek_vl2_tiles(w: int, h: int, extras: dict[str, Any]) -> list[Block]:
    size, patch, ratio, candidates = _need(extras, "image_size", "patch_size", "downsample_ratio",
                                           "candidate_resolutions")
    n_patch = size // patch  # the ViT sees n_patch * patch px of each 384 view
    per = math.ceil(n_patch / ratio)
    valid = n_patch * patch
    gw, gh, gx, gy = _pil_pad_geometry(w, h, size, size)
    g_xs = back(_vl2_tile_spans(1, size, per, patch * ratio, valid), gx, gw / w)
    g_ys = back(_vl2_tile_spans(1, size, per, patch * ratio, valid), gy, gh / h)
    best_w, best_h = deepseek_vl2_best_resolution((w, h), candidates) if extras.get("cropping", True) \
        else (size, size)
    lw, lh, lx, ly = _pil_pad_geometry(w, h, best_w, best_h)
    l_xs = back(_vl2_tile_spans(best_w // size, size, per, patch * ratio, valid), lx, lw / w)
    l_ys = back(_vl2_tile_spans(best_h // size, size, per, patch * ratio, valid), ly, lh / h)
    return [Grid("global", g_xs, g_ys, newline=True), Gap("separator"), Grid("local", l_xs, l_ys, newline=True)]


# --- Phi-4 multimodal (HF port of the remote code): HD crops with a newline column, separator, global 16 x 17
def phi4_dynamic_hd(w: int, h: int, extras: dict[str, Any]) -> list[Block]:
    crop, patch = _need(extras, "crop_size", "patch_size")
    max_crops = int(extras.get("dynamic_hd", 36))
    (tw, th), (new_w, new_h) = phi4_hd_canvas(w, h, crop, max_crops)
    mask = crop // patch  # patches per crop side
    base = (mask + 1) // 2  # tokens per crop side after 2x2 average pooling
    tok = 2 * patch
    pad_w, pad_h = tw - new_w, th - new_h
    # Valid patch rows/cols (mask zeroes floor(pad / patch) trailing patches), sampled at even indices.
    valid_cols = tw // patch - (pad_w // patch if pad_w >= patch else 0)
    valid_rows = th // patch - (pad_h // patch if pad_h >= patch else 0)
    useful_w, useful_h = (valid_cols + 1) // 2, (valid_rows + 1) // 2
    hd_xs = back(spans(useful_w, tok), 0, new_w / w)
    hd_ys = back(spans(useful_h, tok), 0, new_h / h)
    # The global view squashes the padded HD canvas (padding included) to one crop.
    g_xs = back(spans(base, tw / base), 0, new_w / w)
    g_ys = back(spans(base, th / base), 0, new_h / h)
    return [Grid("hd", hd_xs, hd_ys, newline=True), Gap("separator"), Grid("global", g_xs, g_ys, newline=True)]


# --- Idefics3 / SmolVLM: tiles of the image resized to a multiple of the tile size, global image last
def idefics3_split(w: int, h: int, longest_edge: int, tile: int, max_side: int = 4096) -> tuple[int, int]:
    """(rows, cols) of Idefics3ImageProcessor's split (0, 0 = no split): resize, then round up to whole tiles."""
    aspect = w / h
    if w >= h:  # _resize_output_size_rescale_to_max_len
        w, h = longest_edge, int(longest_edge / aspect)
        h += h % 2
    else:
        h, w = longest_edge, int(longest_edge * aspect)
        w += w % 2
    h, w = max(h, 1), max(w, 1)
    if w >= h and w > max_side:  # _resize_output_size_scale_below_upper_bound
        w, h = max_side, max(int(max_side / aspect), 1)
    elif h > w and h > max_side:
        h, w = max_side, max(int(max_side * aspect), 1)
    aspect = w / h  # resize_for_vision_encoder
    if w >= h:
        w = math.ceil(w / tile) * tile
        h = math.ceil(int(w / aspect) / tile) * tile
    else:
        h = math.ceil(h / tile) * tile
        w = math.ceil(int(h * aspect) / tile) * tile
    if h > tile or w > tile:
        return math.ceil(h / tile), math.ceil(w / tile)
    return 0, 0


def idefics3_tiles(w: int, h: int, extras: dict[str, Any]) -> list[Block]:
    (per_tile,) = _need(extras, "tokens_per_tile")
    side = math.isqrt(int(per_tile))
    if extras.get("rows") is not None and extras.get("cols") is not None:
        rows, cols = int(extras["rows"]), int(extras["cols"])
    elif extras.get("do_image_splitting", True):
        longest, tile = _need(extras, "longest_edge", "tile_size")
        rows, cols = idefics3_split(w, h, int(longest), int(tile))
    else:
        rows = cols = 0
    blocks: list[Block] = []
    if rows * cols > 0:
        tw, th = w / cols, h / rows  # every resize squashes the whole image: tiles split it evenly
        blocks = [Grid("tile", spans(side, tw / side, (i % cols) * tw), spans(side, th / side, (i // cols) * th))
                  for i in range(rows * cols)]
    blocks.append(Grid("global", spans(side, w / side), spans(side, h / side)))
    return blocks


# --- Magma (remote code, read not run): the image squashed onto a rows x cols grid of crops, one ConvNeXt feature
# per 32 px of the canvas, crops stitched into one grid, a row separator token ending every feature row
MAGMA_FEATURE_STRIDE = 32  # ConvNeXt trunk output (`clip_vis_dense`, res5): stem /4, three /2 downsamplings


def magma_crops(w: int, h: int, extras: dict[str, Any]) -> list[Block]:
    """MagmaImageProcessor resizes the whole image (bilinear, no padding) to (cols x crop, rows x crop) and cuts it
    into crops; MagmaForCausalLM stitches the crops' feature maps back into one (rows x s, cols x s) grid and
    appends `row_seperator` to every row, s = crop // 32. `image_sizes` is (rows, cols) as the processor wrote it.
    Both anyres strategies ("crop": tower per crop; "global": tower on the re-stitched canvas) give this grid."""
    (rows, cols), crop = _need(extras, "image_sizes", "crop_size")
    rows, cols, crop = int(rows), int(cols), int(crop)
    stride = int(extras.get("feature_stride", MAGMA_FEATURE_STRIDE))
    strategy = extras.get("anyres_strategy", "crop")
    if strategy not in ("crop", "global"):
        raise VRHError(f"Magma anyres strategy {strategy!r} is not one the model implements (crop, global)")
    side = crop // stride
    if rows < 1 or cols < 1 or side < 1:
        raise VRHError(f"Magma image_sizes ({rows}, {cols}) with crop size {crop} give no feature grid")
    return [Grid(strategy, spans(cols * side, w / (cols * side)), spans(rows * side, h / (rows * side)),
                 newline=True)]


Builder = Callable[[int, int, dict[str, Any]], list[Block]]
# Builders of layouts no registered family uses (DeepSeek-VL v1's padded square: kept for its count tests).
UNREGISTERED_LAYOUTS: dict[str, Builder] = {"deepseek_vl": deepseek_vl_padded}


def _builders() -> dict[str, Builder]:
    rows = dict(UNREGISTERED_LAYOUTS)
    for fam in FAMILIES.values():
        if fam.layout and fam.layout_builder is not None and fam.layout not in rows:
            try:
                rows[fam.layout] = resolve_ref(fam.layout_builder)
            except VRHError as exc:  # a builder the installed transformers cannot import: refused when used
                rows[fam.layout] = _refusing(str(fam.layout_builder).rpartition(":")[2], str(exc))
    return rows


def _refusing(name: str, message: str) -> Builder:
    """A builder that says, when called, why it cannot run here (so one family's newer needs block no other)."""
    def builder(w: int, h: int, extras: dict[str, Any]) -> list[Block]:
        raise VRHError(message)
    builder.__name__ = name
    return builder


# layout name -> builder, derived from the family registry (vrh_lmms.base.families)
BUILDERS: DerivedTable[Builder] = DerivedTable(_builders, "image-token layout")
