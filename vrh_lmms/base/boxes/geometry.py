"""Box arithmetic on ``[x1, y1, x2, y2]`` lists: the one box format every scorer in vrh-lmms compares."""

from __future__ import annotations

from collections.abc import Sequence

Box = list[float]


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
