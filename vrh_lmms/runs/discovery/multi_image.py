"""Evidence in one of several images: the whole image (`image`) or a box in it (`image_box`).

`{"kind": "image", "index": i}` scores a head on every token of image i (0-based, the doc's visual order);
`{"kind": "image_box", "index": i, "box": [x1, y1, x2, y2]}` on the tokens of image i that the box covers (original
pixels of that image, `--key-tokens` rule), which needs the doc's `vrh_image_sizes: [[w, h], ...]`. Positions come
from the exact ids the backend fed, split per image by vrh_lmms.model.capture.multi_image and mapped through the
family's single-image layout; the media key set is every image token of every image. No single token grid, so
Localization Heads is skipped on these kinds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model.capture.extras import layout_extras
from vrh_lmms.model.capture.layouts import box_key_mask
from vrh_lmms.model.capture.multi_image import image_spans, image_token_maps
from vrh_lmms.runs.discovery.evidence import EvidenceKeys, EvidenceKind, KeyContext, register_evidence
from vrh_lmms.runs.discovery.targets import _expression, doc_image_id

KIND_IMAGE = "image"
KIND_IMAGE_BOX = "image_box"
SIZES_KEY = "vrh_image_sizes"


@dataclass(frozen=True)
class ImageTarget:
    """Image `index` of a doc's several images; `box` for image_box. `image_size` is None: no single-image layout."""

    kind: str
    index: int
    sizes: tuple[tuple[int, int], ...] | None
    box: tuple[float, float, float, float] | None
    expression: str
    image_id: str
    image_size: None = None


def _sizes(doc: Mapping[str, Any], where: str, required: bool) -> tuple[tuple[int, int], ...] | None:
    raw = doc.get(SIZES_KEY)
    if raw is None:
        if required:
            raise VRHError(f"{where}: image_box evidence needs {SIZES_KEY} [[w, h], ...], one per image")
        return None
    try:
        sizes = tuple((int(w), int(h)) for w, h in raw)
    except (TypeError, ValueError):
        raise VRHError(f"{where}: {SIZES_KEY} must be [[w, h], ...], got {raw!r}") from None
    if not sizes or any(w <= 0 or h <= 0 for w, h in sizes):
        raise VRHError(f"{where}: {SIZES_KEY} must list positive [w, h] per image, got {raw!r}")
    return sizes


def image_target(doc: Mapping[str, Any], where: str) -> ImageTarget:
    """Read and check a doc's `image` / `image_box` evidence (one line naming the bad field)."""
    ev = doc["vrh_evidence"]
    kind = ev["kind"]
    index = ev.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise VRHError(f"{where}: vrh_evidence of kind {kind} needs `index`, a 0-based image number, got {index!r}")
    sizes = _sizes(doc, where, required=kind == KIND_IMAGE_BOX)
    if sizes is not None and index >= len(sizes):
        raise VRHError(f"{where}: vrh_evidence index {index} is out of range for {len(sizes)} images "
                       f"({SIZES_KEY})")
    box = None
    if kind == KIND_IMAGE_BOX:
        raw = ev.get("box")
        try:
            box = tuple(float(v) for v in raw)
        except (TypeError, ValueError):
            box = ()
        w, h = sizes[index]
        if len(box) != 4 or box[2] < box[0] or box[3] < box[1] or box[2] <= 0 or box[3] <= 0 \
                or box[0] >= w or box[1] >= h:
            raise VRHError(f"{where}: vrh_evidence box must be [x1, y1, x2, y2] inside image {index} ({w}x{h}), "
                           f"got {raw!r}")
    expression = str(ev.get("query") or _expression(dict(doc)))
    return ImageTarget(kind, index, sizes, box, expression, doc_image_id(doc))


def image_keys(target: ImageTarget, ctx: KeyContext) -> EvidenceKeys:
    """Image i's tokens (or the box's within them) as evidence; every image token of every image as media."""
    seq_len, ids = ctx.seq_len, ctx.prompt_ids
    evidence = torch.zeros(seq_len, dtype=torch.bool)
    media = torch.zeros(seq_len, dtype=torch.bool)
    if target.sizes is None:  # `image` without sizes: the spans alone
        token = layout_extras(ctx.family, ctx.processor, ctx.tensors, 0, backend=ctx.backend)["image_token_id"]
        spans = [s.placeholders for s in image_spans(ctx.family, ids, ctx.tokenizer, token)]
    else:
        maps = image_token_maps(ctx.family, ids, target.sizes, ctx.processor, ctx.tensors, backend=ctx.backend)
        spans = [m.all_positions for m in maps]
    if target.index >= len(spans):
        raise VRHError(f"vrh_evidence index {target.index} is out of range: the prompt shows {len(spans)} images")
    for positions in spans:
        media[positions] = True
    if target.kind == KIND_IMAGE:
        evidence[spans[target.index]] = True
    else:
        evidence = box_key_mask(maps[target.index], target.box, seq_len, rule=ctx.key_tokens)
    return EvidenceKeys(evidence, media)


IMAGE = register_evidence(EvidenceKind(KIND_IMAGE, image_target, image_keys, grid=False,
                                       doc="the whole image `index` among the doc's several images"))
IMAGE_BOX = register_evidence(EvidenceKind(KIND_IMAGE_BOX, image_target, image_keys, grid=False,
                                           doc="a box in image `index` of several (vrh_image_sizes)"))
