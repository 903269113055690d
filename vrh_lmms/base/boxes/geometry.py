"""Box arithmetic on ``[x1, y1, x2, y2]`` lists: the one box format every scorer in vrh-lmms compares."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

from vrh_lmms.base.errors import VRHError

Box = list[float]
# How far a ground-truth box may reach past the image: COCO's float boxes overshoot their image by a fraction of a
# pixel; more is a box of another image or another convention, which would map to the wrong (corner) tokens.
EDGE_SLACK = 1.0


def xywh_to_xyxy(box: Sequence[float]) -> Box:
    """COCO ``[x, y, w, h]`` (RefCOCO, VAW) to ``[x1, y1, x2, y2]``."""
    x, y, w, h = (float(v) for v in box)
    return [x, y, x + w, y + h]


def order_corners(box: Sequence[float]) -> Box:
    """Swap corners given in the wrong order (models sometimes emit ``[x2, y2, x1, y1]``)."""
    x1, y1, x2, y2 = (float(v) for v in box)
    return [min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2)]


def clip_box(box: Sequence[float], width: float, height: float) -> Box:
    """Clip to the image; values outside it are model noise, not a reason to reject the box."""
    x1, y1, x2, y2 = (float(v) for v in box)
    return [min(max(x1, 0.0), width), min(max(y1, 0.0), height), min(max(x2, 0.0), width), min(max(y2, 0.0), height)]


def area(box: Sequence[float]) -> float:
    return max(0.0, float(box[2]) - float(box[0])) * max(0.0, float(box[3]) - float(box[1]))


def iou(a: Sequence[float], b: Sequence[float]) -> float:
    """Intersection over union of two xyxy boxes; 0 when the union is empty (as torchvision's box_iou gives 0/0)."""
    iw = min(float(a[2]), float(b[2])) - max(float(a[0]), float(b[0]))
    ih = min(float(a[3]), float(b[3])) - max(float(a[1]), float(b[1]))
    inter = max(0.0, iw) * max(0.0, ih)
    union = area(a) + area(b) - inter
    return inter / union if union > 0 else 0.0


def checked_box(box: Any, image_size: tuple[int, int], where: str, *, xywh: bool = False) -> Box:
    """A ground-truth box as ``[x1, y1, x2, y2]`` floats, refused in one line naming `where` (doc and field) when it
    is short, not numbers, NaN or infinite, of zero or negative area, or outside the image; `xywh`: COCO order."""
    if isinstance(box, (str, bytes)) or not isinstance(box, Sequence) and not hasattr(box, "__len__"):
        raise VRHError(f"{where} is {box!r}: expected 4 numbers ({'x, y, w, h' if xywh else 'x1, y1, x2, y2'})")
    values = list(box)
    if len(values) != 4:
        raise VRHError(f"{where} has {len(values)} number{'' if len(values) == 1 else 's'} ({values!r}), needs 4")
    if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values):
        raise VRHError(f"{where} is {values!r}: every coordinate must be a number")
    values = [float(v) for v in values]
    if not all(math.isfinite(v) for v in values):
        raise VRHError(f"{where} is {values!r}: every coordinate must be finite")
    x1, y1, x2, y2 = xywh_to_xyxy(values) if xywh else values
    if x2 <= x1 or y2 <= y1:
        raise VRHError(f"{where} is {values!r}: zero or negative area")
    width, height = image_size
    if x1 < -EDGE_SLACK or y1 < -EDGE_SLACK or x2 > width + EDGE_SLACK or y2 > height + EDGE_SLACK:
        raise VRHError(f"{where} is {values!r}: outside the {width} x {height} image")
    return [x1, y1, x2, y2]
