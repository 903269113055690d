"""Box conventions of VLM families: prompts, tolerant output parsers, conversion to original pixels, IoU.

Pure functions; nothing here imports lmms-eval, torch or transformers.

    from vrh_lmms.base.boxes import get_convention, iou
    conv = get_convention("qwen2_5_vl")
    conv.prompt("the red circle")
    reading = conv.read_box(reply, (width, height), min_pixels=..., max_pixels=...)
    reading.box  # [x1, y1, x2, y2] in original-image pixels, or None (parse failure)

Model wrappers announce their convention with ``vrh_lmms.base.boxes.context.set_active(name, **params)``.
"""

import importlib

from vrh_lmms.base.boxes.conventions import BoxReading, Convention, PointReading
from vrh_lmms.base.boxes.geometry import clip_box, iou, order_corners, xywh_to_xyxy
from vrh_lmms.base.boxes.resize import qwen2_5_vl_model_size

# Read from the family registry, which imports the conventions above (vrh_lmms.base.families -> boxes.conventions): the
# package reaches them on first use, so importing a convention never first imports the registry that needs it.
_REGISTRY_BACKED = {"CONVENTIONS": "known", "get_convention": "known", "Resolved": "context",
                    "clear_active": "context", "get_active": "context", "resolve": "context", "set_active": "context"}


def __getattr__(name: str):
    if name in _REGISTRY_BACKED:
        return getattr(importlib.import_module(f"vrh_lmms.base.boxes.{_REGISTRY_BACKED[name]}"), name)
    raise AttributeError(f"module 'vrh_lmms.base.boxes' has no attribute {name!r}")

__all__ = [
    "CONVENTIONS", "BoxReading", "Convention", "PointReading", "Resolved", "clear_active", "clip_box",
    "get_active", "get_convention", "iou", "order_corners", "qwen2_5_vl_model_size", "resolve", "set_active",
    "xywh_to_xyxy",
]
