"""What discovery needs from a grounding doc: the ground-truth box in original pixels, the image size, the
referring expression and an image id. Our tasks' docs carry these under `vrh_*` names; raw RefCOCO-schema rows
(COCO xywh `bbox`, `answer` list) and Toloka rows (`left/top/right/bottom`, `question`) are understood too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vrh_lmms.base.boxes.geometry import checked_box
from vrh_lmms.base.errors import VRHError


@dataclass(frozen=True)
class Target:
    box: tuple[float, float, float, float]  # x1, y1, x2, y2, original pixels
    image_size: tuple[int, int]  # width, height
    expression: str
    image_id: str


def _image_size(doc: dict[str, Any]) -> tuple[int, int] | None:
    for key in ("vrh_image_size", "image_size"):
        if isinstance(doc.get(key), (list, tuple)) and len(doc[key]) == 2:
            return int(doc[key][0]), int(doc[key][1])
    if doc.get("image_width") and doc.get("image_height"):
        return int(doc["image_width"]), int(doc["image_height"])
    if doc.get("width") and doc.get("height"):
        return int(doc["width"]), int(doc["height"])
    image = doc.get("image")
    if hasattr(image, "size"):
        return tuple(int(v) for v in image.size)  # type: ignore[return-value]
    return None


def _expression(doc: dict[str, Any]) -> str:
    for key in ("vrh_expression", "expression", "sentence", "question"):
        if isinstance(doc.get(key), str) and doc[key].strip():
            return doc[key]
    answer = doc.get("answer")
    if isinstance(answer, (list, tuple)) and answer and isinstance(answer[0], str):
        return answer[0]
    return ""


def doc_image_id(doc: Mapping[str, Any]) -> str:
    """The id that clusters a doc's statistics (docs sharing an image or clip share it): `vrh_image_id`, else
    `image_id`, else `question_id`; every evidence kind records it."""
    return str(doc.get("vrh_image_id", doc.get("image_id", doc.get("question_id", ""))))


def target_from_doc(doc: dict[str, Any], where: str = "doc") -> Target:
    size = _image_size(doc)
    if size is None:
        raise VRHError(f"{where}: cannot tell the image size (no vrh_image_size/image_size field and no image)")
    # every box is checked where it is read (short, NaN, no area, outside the image): one line naming the doc
    if "vrh_gt_box" in doc or "gt_box" in doc:
        key = "vrh_gt_box" if "vrh_gt_box" in doc else "gt_box"
        x1, y1, x2, y2 = checked_box(doc[key], size, f"{where}: field {key!r}")
    elif all(k in doc for k in ("left", "top", "right", "bottom")):
        x1, y1, x2, y2 = checked_box([doc[k] for k in ("left", "top", "right", "bottom")], size,
                                     f"{where}: fields left/top/right/bottom")
    elif "bbox" in doc and doc["bbox"] is not None:  # COCO / RefCOCO: x, y, w, h pixels
        x1, y1, x2, y2 = checked_box(doc["bbox"], size, f"{where}: field 'bbox' (x, y, w, h)", xywh=True)
    else:
        raise VRHError(f"{where}: no ground-truth box (expected vrh_gt_box [x1,y1,x2,y2], a COCO bbox, or "
                       f"left/top/right/bottom); discovery needs a grounding task")
    return Target((x1, y1, x2, y2), size, _expression(doc), doc_image_id(doc))
