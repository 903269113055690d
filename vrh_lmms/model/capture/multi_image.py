"""Several images in one prompt -> one token map per image, each through the family's single-image layout.

A processor writes every image of a prompt as its own span: Qwen2.5-VL / Qwen3-VL `<|vision_start|>` + one
`<|image_pad|>` per merged cell + `<|vision_end|>`, with one `image_grid_thw` row per image in visual order;
InternVL (transformers' InternVLProcessor) `<img>` + `<IMG_CONTEXT>` x (tokens per tile x that image's own tile
count) + `</img>`, every image tiled on its own by GotOcr2's `crop_to_patches` under the same min / max patches.
`image_spans` splits the prompt at those markers (spans of video placeholders are not images and are skipped),
`image_token_maps` maps span i through `tilings.BUILDERS` with image i's size and extras and `layouts.assemble`,
so each image's count and cells are checked as a single image's are. A prompt whose spans do not match the images
named is refused in one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model.capture.extras import layout_extras
from vrh_lmms.model.capture.layouts import ImageTokenMap, assemble, layout_name, placeholder_positions
from vrh_lmms.model.capture.tilings import BUILDERS

# layout -> (start marker, end marker) around each image's placeholders
SPAN_MARKERS: dict[str, tuple[str, str]] = {"qwen2_5_vl": ("<|vision_start|>", "<|vision_end|>"),
                                            "qwen3_vl": ("<|vision_start|>", "<|vision_end|>"),
                                            "internvl": ("<img>", "</img>")}
# families whose processor writes other markers than their layout's (Qwen2.5-Omni: Qwen2.5-VL's image layout inside
# `<|vision_bos|>` ... `<|vision_eos|>`)
FAMILY_MARKERS: dict[str, tuple[str, str]] = {"qwen2_5_omni": ("<|vision_bos|>", "<|vision_eos|>")}
# layouts whose extras carry one row per image (the processor output's `image_grid_thw`)
PER_IMAGE_ROWS = {"qwen2_5_vl": "image_grid_thw", "qwen3_vl": "image_grid_thw"}


@dataclass(frozen=True)
class ImageSpan:
    """Image `index` of the prompt: its markers' positions and the placeholders between them."""

    index: int
    start: int
    end: int
    placeholders: torch.Tensor  # (n,) long positions of the image tokens


def multi_image_layout(family: str) -> str:
    """The family's layout, refused unless several images per prompt are mapped for it."""
    name = layout_name(family)
    if name not in SPAN_MARKERS:
        raise VRHError(f"several images per prompt are mapped for {', '.join(sorted(SPAN_MARKERS))} layouts, "
                       f"not {family!r} ({name})")
    return name


def marker_ids(family: str, tokenizer: Any) -> tuple[int, int]:
    """Token ids of the family's start / end markers in this tokenizer."""
    out = []
    for token in FAMILY_MARKERS.get(family) or SPAN_MARKERS[multi_image_layout(family)]:
        tid = tokenizer.convert_tokens_to_ids(token)
        if not isinstance(tid, int) or tid == getattr(tokenizer, "unk_token_id", None):
            raise VRHError(f"{type(tokenizer).__name__} has no {token} token, which delimits {family} images")
        out.append(int(tid))
    return out[0], out[1]


def image_spans(family: str, ids_row: torch.Tensor, tokenizer: Any, image_token_id: int | Sequence[int],
                ) -> list[ImageSpan]:
    """The prompt's image spans in sequence order; every image placeholder must sit inside one."""
    start_id, end_id = marker_ids(family, tokenizer)
    ids = ids_row.detach().cpu()
    placeholders = placeholder_positions(ids, image_token_id)
    starts = torch.nonzero(ids == start_id).flatten().tolist()
    ends = torch.nonzero(ids == end_id).flatten().tolist()
    if len(starts) != len(ends) or any(e <= s for s, e in zip(starts, ends)) \
            or any(n <= e for e, n in zip(ends, starts[1:])):
        raise VRHError(f"{family} prompt has unbalanced image markers ({len(starts)} starts, {len(ends)} ends)")
    spans, covered = [], 0
    for s, e in zip(starts, ends):
        inside = placeholders[(placeholders > s) & (placeholders < e)]
        if inside.numel() == 0:
            continue  # a video span, or markers with no image between them
        if inside.numel() != e - s - 1:
            raise VRHError(f"{family} image span at {s}..{e} holds {e - s - 1 - inside.numel()} tokens that are not "
                           f"image placeholders")
        spans.append(ImageSpan(len(spans), int(s), int(e), inside))
        covered += inside.numel()
    if covered != placeholders.numel():
        raise VRHError(f"{placeholders.numel() - covered} image placeholders of the {family} prompt lie outside "
                       f"its image markers")
    return spans


def per_image_extras(family: str, processor: Any, batch: Any, n_images: int, backend: Any = None,
                     ) -> list[dict[str, Any]]:
    """Image i's layout extras, for a batch of one prompt showing `n_images` images."""
    name = multi_image_layout(family)
    key = PER_IMAGE_ROWS.get(name)
    if key is not None:
        rows = batch.get(key) if hasattr(batch, "get") else None
        have = 0 if rows is None else len(rows)
        if have != n_images:
            raise VRHError(f"{family} processor output has {have} {key} rows for {n_images} images")
        return [layout_extras(family, processor, batch, i, backend=backend) for i in range(n_images)]
    extras = layout_extras(family, processor, batch, 0, backend=backend)
    if extras.get("tiling", "hf") != "hf":
        raise VRHError(f"several images are mapped for transformers' InternVL processor, not the remote-code "
                       f"{extras['tiling']!r} tiling (which shares max_num among a prompt's images)")
    return [dict(extras) for _ in range(n_images)]


def image_token_maps(family: str, ids_row: torch.Tensor, image_sizes: Sequence[Sequence[int]], processor: Any,
                     batch: Any, backend: Any = None) -> list[ImageTokenMap]:
    """One ImageTokenMap per image of the prompt (visual order), each image by its own size and extras.

    image_sizes: (width, height) of every image the prompt shows, in order."""
    name = multi_image_layout(family)
    sizes = [(int(w), int(h)) for w, h in image_sizes]
    if any(w <= 0 or h <= 0 for w, h in sizes):
        raise VRHError(f"image sizes must be positive (width, height), got {sizes}")
    extras = per_image_extras(family, processor, batch, len(sizes), backend)
    spans = image_spans(family, ids_row, processor.tokenizer, extras[0]["image_token_id"])
    if len(spans) != len(sizes):
        raise VRHError(f"the {family} prompt shows {len(spans)} images but {len(sizes)} image sizes are given")
    maps = []
    for span, (w, h), ex in zip(spans, sizes, extras):
        blocks = BUILDERS[name](w, h, {"n_tokens": span.placeholders.numel(), **ex})
        try:
            maps.append(assemble(blocks, span.placeholders, (w, h)))
        except VRHError as exc:
            raise VRHError(f"image {span.index} ({w}x{h}): {exc}") from None
    return maps
