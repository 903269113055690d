"""Check an image-token layout by experiment rather than by reading code.

With every attention module of the vision side zeroed (its output replaced by zeros, so the residual stream carries
each patch on its own), a vision token depends only on the pixels of its own cell. Drawing a rectangle on a flat
image then changes exactly the tokens whose cells the rectangle touches; those are read at the input of text layer
0 and compared with what the layout predicts (`box_key_mask(..., rule="any")`). The rectangle's edges are kept
away from every cell border of every view, so the resampling kernel's spill (a few pixels) cannot reach a
neighbouring cell.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from PIL import Image, ImageDraw
from torch import nn

from vrh_lmms.model.backbone import _get_path, locate_decoder
from vrh_lmms.model.capture.extras import layout_extras
from vrh_lmms.model.capture.layouts import ImageTokenMap, box_key_mask, image_token_map, lm_input_ids


@contextmanager
def zeroed_vision_attention(model: nn.Module) -> Iterator[int]:
    """Replace the output of every non-decoder attention module but a pooling one with zeros; yields how many were
    hooked."""
    dec = locate_decoder(model)
    layers = _get_path(model, dec.layers_path)
    inside = {id(m) for m in layers.modules()}
    handles = []

    def zero(_module, _args, output):
        if isinstance(output, tuple):
            return (torch.zeros_like(output[0]), *output[1:])
        return torch.zeros_like(output)

    for name, module in model.named_modules():
        # attention pooling (Molmo 2's adapter) mixes only the patches of one window: it stays, or nothing is seen
        if type(module).__name__.endswith("Attention") and id(module) not in inside and "pool" not in name:
            handles.append(module.register_forward_hook(zero))
    try:
        yield len(handles)
    finally:
        for h in handles:
            h.remove()


def layer0_inputs(model: nn.Module, batch) -> torch.Tensor:
    """Hidden states entering text decoder layer 0, (batch, T, d)."""
    dec = locate_decoder(model)
    layer0 = _get_path(model, dec.layers_path)[0]
    seen: list[torch.Tensor] = []

    def grab(_module, args, kwargs):
        seen.append((args[0] if args else kwargs["hidden_states"]).detach().clone())

    handle = layer0.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        with torch.no_grad():
            model(**batch)
    finally:
        handle.remove()
    return seen[0]


def _clear_edge(lo: float, hi: float, borders: torch.Tensor) -> tuple[int, float]:
    """Integer coordinate in [lo, hi] farthest from every border, and that distance."""
    cand = torch.arange(int(lo), int(hi) + 1, dtype=torch.float32)
    dist = (cand[:, None] - borders[None, :]).abs().min(dim=1).values
    best = int(dist.argmax())
    return int(cand[best]), float(dist[best])


def clear_rect(tmap: ImageTokenMap, frac: tuple[float, float, float, float]) -> tuple[list[int], float]:
    """A rectangle near the fractional box `frac` whose edges keep the largest distance to all cell borders."""
    w, h = tmap.image_size
    xb = torch.unique(torch.cat([tmap.cells[:, 0], tmap.cells[:, 2]]))
    yb = torch.unique(torch.cat([tmap.cells[:, 1], tmap.cells[:, 3]]))
    edges, clearance = [], float("inf")
    for f, size, borders in ((frac[0], w, xb), (frac[1], h, yb), (frac[2], w, xb), (frac[3], h, yb)):
        v, d = _clear_edge(max(1, f * size - 0.15 * size), min(size - 1, f * size + 0.15 * size), borders)
        edges.append(v)
        clearance = min(clearance, d)
    return edges, clearance


@dataclass
class LayoutCheck:
    predicted: set[int]
    changed: set[int]
    image_tokens: int
    rect: list[int]
    clearance: float
    hooked: int


def check_layout(model: nn.Module, processor, family: str, image_size: tuple[int, int], make_batch,
                 frac: tuple[float, float, float, float] = (0.2, 0.3, 0.55, 0.7), atol: float = 1e-6,
                 background: tuple[int, int, int] = (128, 128, 128), fill: tuple[int, int, int] = (250, 20, 20),
                 ) -> LayoutCheck:
    """Draw a rectangle on a flat image; compare changed layer-0 inputs with the layout's prediction.

    make_batch(processor, image) -> processor output for one sample (the family's prompt around one image).
    """
    flat = Image.new("RGB", image_size, background)
    batch = make_batch(processor, flat)
    extras = layout_extras(family, processor, batch, 0)
    row = lm_input_ids(family, batch["input_ids"][0], image_size, extras)  # positions of layer 0's input
    tmap = image_token_map(family, row, image_size, extras)
    rect, clearance = clear_rect(tmap, frac)
    drawn = flat.copy()
    ImageDraw.Draw(drawn).rectangle([rect[0], rect[1], rect[2] - 1, rect[3] - 1], fill=fill)
    batch2 = make_batch(processor, drawn)
    assert torch.equal(batch2["input_ids"], batch["input_ids"])
    with zeroed_vision_attention(model) as hooked:
        a, b = layer0_inputs(model, batch), layer0_inputs(model, batch2)
    diff = (a[0] - b[0]).abs().amax(-1)
    changed = set(torch.nonzero(diff > atol).flatten().tolist())
    predicted = set(torch.nonzero(box_key_mask(tmap, rect, row.shape[0], rule="any")).flatten().tolist())
    return LayoutCheck(predicted, changed, len(tmap.all_positions), rect, clearance, hooked)
