"""Image tokens -> cells of the original image, and ground-truth boxes -> key positions.

`image_token_map(family, input_ids_row, image_size, extras)` pairs every image placeholder of one sample with the
cell of the *original* image (pixels, [x1, y1, x2, y2]) that its vision token covers; placeholders that cover no
image pixels (newline columns, view separators, tokens entirely in padding) are listed in `no_cell`. Positions are
those of the language model's sequence: for Magma, whose forward expands each `<image>`, map `lm_input_ids(...)`.

Box -> tokens rule (`box_key_mask`), applied per view (a view is one rendering of the image: "image", "tile",
"thumbnail", "base", "anyres", "global", ...):
- "overlap" (default): a token counts when at least half of its cell's area lies inside the box; if no token of a
  view qualifies, that view contributes the token whose cell holds the box centre (the nearest cell when the
  centre falls in a strip no token sees), so tiny boxes are never empty.
- "any": a token counts when its cell intersects the box with positive area.
- "center": a token counts when its cell centre lies inside the box (closed box).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.families import FAMILIES
from vrh_lmms.base.tables import did_you_mean
from vrh_lmms.model.capture.tilings import BUILDERS, Gap, Grid

RULES = ("overlap", "any", "center")
# The view that shows the whole image once, for a per-image token grid (multi-view layouts: the base / global view).
MAIN_VIEWS = ("image", "base", "thumbnail", "global")


@dataclass
class ImageTokenMap:
    """One sample's image tokens: key positions, their cells in original pixels, and the view of each."""

    positions: torch.Tensor  # (n,) long key positions in input_ids
    cells: torch.Tensor  # (n, 4) float [x1, y1, x2, y2] in original pixels
    view: list[str]  # per token: "image", "tile", "thumbnail", "base", "anyres", "global", "local", "hd"
    no_cell: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))  # placeholders w/o cell
    image_size: tuple[int, int] = (0, 0)  # (width, height) of the original image

    @property
    def all_positions(self) -> torch.Tensor:
        """Every image placeholder position (with or without a cell), sorted."""
        return torch.sort(torch.cat([self.positions, self.no_cell])).values

    def key_mask(self, seq_len: int) -> torch.Tensor:
        """(seq_len,) bool over all image placeholders: the "image" key set."""
        mask = torch.zeros(seq_len, dtype=torch.bool)
        mask[self.all_positions] = True
        return mask


def layout_name(family: str) -> str:
    """A family's layout (vrh_lmms.base.families), or the name itself when it already is a layout."""
    fam = FAMILIES.get(family)
    name = fam.layout if fam is not None and fam.layout else family
    if name not in BUILDERS:
        raise VRHError(f"no image-token layout for {family!r}{did_you_mean(family, BUILDERS)}; "
                       f"known: {', '.join(sorted(BUILDERS))}")
    return name


def placeholder_positions(input_ids_row: torch.Tensor, token_ids: int | Sequence[int]) -> torch.Tensor:
    ids = torch.as_tensor([token_ids] if isinstance(token_ids, int) else list(token_ids))
    return torch.nonzero(torch.isin(input_ids_row.cpu(), ids)).flatten()


def assemble(blocks: list[Grid | Gap], placeholders: torch.Tensor, image_size: tuple[int, int]) -> ImageTokenMap:
    """Walk the blocks in sequence order over the placeholder positions; clip cells to the image."""
    total = sum(b.n_tokens for b in blocks)
    if total != len(placeholders):
        raise VRHError(f"layout predicts {total} image tokens but the input has {len(placeholders)} placeholders "
                       "(wrong extras, several images, or a processor this layout does not describe)")
    w, h = image_size
    pos, cells, views, no_cell = [], [], [], []
    k = 0
    for block in blocks:
        if isinstance(block, Gap):
            no_cell.extend(placeholders[k:k + block.count].tolist())
            k += block.count
            continue
        for y1, y2 in block.ys:
            for x1, x2 in block.xs:
                cx1, cy1, cx2, cy2 = max(x1, 0.0), max(y1, 0.0), min(x2, float(w)), min(y2, float(h))
                if cx2 - cx1 <= 1e-9 or cy2 - cy1 <= 1e-9:
                    no_cell.append(int(placeholders[k]))  # the token sees padding only
                else:
                    pos.append(int(placeholders[k]))
                    cells.append((cx1, cy1, cx2, cy2))
                    views.append(block.view)
                k += 1
            if block.newline:
                no_cell.append(int(placeholders[k]))
                k += 1
    return ImageTokenMap(positions=torch.tensor(pos, dtype=torch.long),
                         cells=torch.tensor(cells, dtype=torch.float32).reshape(-1, 4), view=views,
                         no_cell=torch.tensor(sorted(no_cell), dtype=torch.long), image_size=(int(w), int(h)))


# Layouts whose model receives one placeholder per image and puts the image's features there inside its forward
# (Magma: `MagmaForCausalLM._merge_input_ids_with_image_features`), so the language model's sequence is longer
# than input_ids; every other processor writes one placeholder per image token itself.
EXPANDED_IN_FORWARD = frozenset({"magma"})


def lm_input_ids(family: str, input_ids_row: torch.Tensor, image_size: tuple[int, int],
                 extras: dict[str, Any]) -> torch.Tensor:
    """The ids at the positions the language model sees: for a layout in EXPANDED_IN_FORWARD, the one image
    placeholder repeated as many times as the image has tokens (query rows, key masks and the layout then all count
    positions of the sequence the attention runs over); other layouts' ids unchanged. Idempotent."""
    name = layout_name(family)
    if name not in EXPANDED_IN_FORWARD:
        return input_ids_row
    w, h = (int(v) for v in image_size)
    n = sum(b.n_tokens for b in BUILDERS[name](w, h, {"n_tokens": 0, **extras}))
    places = placeholder_positions(input_ids_row, extras["image_token_id"])
    if len(places) == n:
        return input_ids_row  # already the language model's sequence
    if len(places) != 1:
        raise VRHError(f"{family} input has {len(places)} image placeholders; its layout covers one image per sample")
    p = int(places[0])
    row = input_ids_row.cpu()
    return torch.cat([row[:p], row[p:p + 1].repeat(n), row[p + 1:]])


def image_token_map(family: str, input_ids_row: torch.Tensor, image_size: tuple[int, int],
                    extras: dict[str, Any]) -> ImageTokenMap:
    """Map one sample's image tokens to original-image cells.

    image_size: (width, height) of the original image. extras: what the layout needs from the processor for this
    sample (see vrh_lmms.model.capture.extras.layout_extras), always including `image_token_id` (int or list of ids).
    """
    name = layout_name(family)
    w, h = (int(v) for v in image_size)
    if w <= 0 or h <= 0:
        raise VRHError(f"image size must be positive (width, height), got {image_size}")
    if "image_token_id" not in extras:
        raise VRHError("layout extras lack image_token_id")
    placeholders = placeholder_positions(input_ids_row, extras["image_token_id"])
    if name in EXPANDED_IN_FORWARD and len(placeholders) == 1:
        raise VRHError(f"{family} expands its one image placeholder inside the model's forward: map the ids "
                       "lm_input_ids() returns (the language model's sequence), not the processor's")
    extras = {"n_tokens": len(placeholders), **extras}
    return assemble(BUILDERS[name](w, h, extras), placeholders, (w, h))


def _box_area_fraction(cells: torch.Tensor, box: torch.Tensor) -> torch.Tensor:
    ix = (torch.minimum(cells[:, 2], box[2]) - torch.maximum(cells[:, 0], box[0])).clamp(min=0)
    iy = (torch.minimum(cells[:, 3], box[3]) - torch.maximum(cells[:, 1], box[1])).clamp(min=0)
    area = (cells[:, 2] - cells[:, 0]) * (cells[:, 3] - cells[:, 1])
    return ix * iy / area


def _holds(cells: torch.Tensor, x: torch.Tensor, y: torch.Tensor, w: int, h: int) -> torch.Tensor:
    """Cells holding the point, half-open [x1, x2) except at the image's right / bottom edge."""
    inx = (cells[:, 0] <= x) & ((x < cells[:, 2]) | ((cells[:, 2] >= w) & (x <= cells[:, 2])))
    iny = (cells[:, 1] <= y) & ((y < cells[:, 3]) | ((cells[:, 3] >= h) & (y <= cells[:, 3])))
    return inx & iny


def box_token_indices(tmap: ImageTokenMap, box_xyxy, rule: str = "overlap") -> torch.Tensor:
    """Indices into tmap.positions of the tokens a box selects (see the module docstring for the rules)."""
    if rule not in RULES:
        raise VRHError(f"unknown box rule {rule!r}; use one of {', '.join(RULES)}")
    box = torch.as_tensor([float(v) for v in box_xyxy], dtype=torch.float32)
    if box.numel() != 4 or box[2] < box[0] or box[3] < box[1]:
        raise VRHError(f"box must be [x1, y1, x2, y2] with x1 <= x2, y1 <= y2, got {list(box_xyxy)}")
    cells = tmap.cells
    if rule == "any":
        ix = torch.minimum(cells[:, 2], box[2]) - torch.maximum(cells[:, 0], box[0])
        iy = torch.minimum(cells[:, 3], box[3]) - torch.maximum(cells[:, 1], box[1])
        return torch.nonzero((ix > 0) & (iy > 0)).flatten()
    if rule == "center":
        cx, cy = (cells[:, 0] + cells[:, 2]) / 2, (cells[:, 1] + cells[:, 3]) / 2
        return torch.nonzero((cx >= box[0]) & (cx <= box[2]) & (cy >= box[1]) & (cy <= box[3])).flatten()
    chosen = _box_area_fraction(cells, box) >= 0.5
    w, h = tmap.image_size
    bx = ((box[0] + box[2]) / 2).clamp(0, w)
    by = ((box[1] + box[3]) / 2).clamp(0, h)
    views = sorted(set(tmap.view))
    for view in views:
        in_view = torch.tensor([v == view for v in tmap.view], dtype=torch.bool)
        if (chosen & in_view).any():
            continue
        held = in_view & _holds(cells, bx, by, w, h)
        if not held.any():  # the centre falls between cells (a strip no token sees): take the nearest cell
            dist = ((cells[:, 0] + cells[:, 2]) / 2 - bx) ** 2 + ((cells[:, 1] + cells[:, 3]) / 2 - by) ** 2
            held = torch.zeros_like(in_view)
            held[torch.where(in_view, dist, float("inf")).argmin()] = True
        chosen |= held
    return torch.nonzero(chosen).flatten()


def box_key_mask(tmap: ImageTokenMap, box_xyxy, seq_len: int, rule: str = "overlap") -> torch.Tensor:
    """(seq_len,) bool: key positions of the image tokens the box selects under `rule`."""
    mask = torch.zeros(seq_len, dtype=torch.bool)
    mask[tmap.positions[box_token_indices(tmap, box_xyxy, rule)]] = True
    return mask


def main_view_grid(tmap: ImageTokenMap) -> torch.Tensor:
    """(rows, cols) long: for each cell of the main view's token grid, its index into tmap.positions (-1 where no
    token covers image pixels). The main view is the first of MAIN_VIEWS the layout has (Qwen's single `image`,
    LLaVA-NeXT's `base`, InternVL's `thumbnail`, the `global` view of tiled layouts), or its only view."""
    views = set(tmap.view)
    main = next((v for v in MAIN_VIEWS if v in views), None)
    if main is None:
        if len(views) != 1:
            raise VRHError(f"no main view among the image's views {sorted(views)}; a token grid needs one of "
                           f"{', '.join(MAIN_VIEWS)}")
        main = next(iter(views))
    idx = torch.tensor([i for i, v in enumerate(tmap.view) if v == main], dtype=torch.long)
    xs = torch.unique(tmap.cells[idx, 0])
    ys = torch.unique(tmap.cells[idx, 1])
    row, col = torch.searchsorted(ys, tmap.cells[idx, 1]), torch.searchsorted(xs, tmap.cells[idx, 0])
    if torch.unique(row * len(xs) + col).numel() != idx.numel():
        raise VRHError(f"the {main!r} view covers some image cells twice; it has no single token grid")
    grid = torch.full((len(ys), len(xs)), -1, dtype=torch.long)
    grid[row, col] = idx
    return grid
