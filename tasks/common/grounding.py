"""doc_to_visual / doc_to_text / process_results of the box and point grounding tasks.

The prompt and the reading of the reply both follow the box convention resolved by ``vrh_lmms.base.boxes.context``
(env > task kwarg > active model wrapper > model-name mapping > generic); ``doc_to_text`` remembers what it used
under the doc's ``vrh_key`` and ``process_results`` reads the reply the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from vrh_lmms.base.boxes import context
from vrh_lmms.base.boxes.backends import backend_box_params, calling_backend
from vrh_lmms.base.boxes.geometry import iou
from vrh_lmms.tasks.common.records import GROUNDING_METRICS, grounding_result, pointing_result, with_clusters

# Toloka asks a question whose answer is an object; the convention's prompt gets it as the expression.
TOLOKA_EXPRESSION = 'the object that answers the question "{question}"'


def doc_to_visual(doc: Mapping[str, Any]) -> list:
    """The image; also notes how the backend taking it resizes (Qwen2.5-VL chat vs simple path), for scoring."""
    if doc.get("vrh_key"):
        seen = backend_box_params(calling_backend())
        if seen is not None:
            context.observe(doc["vrh_key"], *seen)
    return [doc["image"].convert("RGB")]


def _convention_for(doc: Mapping[str, Any], kwargs: Mapping[str, Any] | None) -> context.Resolved:
    resolved = context.resolve(kwargs)
    if doc.get("vrh_key"):
        context.remember(doc["vrh_key"], resolved)
    return resolved


def _scoring_convention(doc: Mapping[str, Any]) -> context.Resolved:
    return context.for_scoring(doc.get("vrh_key"))


def doc_to_text(doc: Mapping[str, Any], lmms_eval_specific_kwargs: Mapping[str, Any] | None = None) -> str:
    """The resolved convention's box request for the doc's referring expression."""
    resolved = _convention_for(doc, lmms_eval_specific_kwargs)
    return resolved.convention.prompt(doc["expression"])


def question_doc_to_text(doc: Mapping[str, Any], lmms_eval_specific_kwargs: Mapping[str, Any] | None = None) -> str:
    """Toloka: the expression is a question whose answer is an object; ask for that object's box."""
    resolved = _convention_for(doc, lmms_eval_specific_kwargs)
    return resolved.convention.prompt(TOLOKA_EXPRESSION.format(question=doc["expression"].strip().rstrip("?") + "?"))


def _reply(results: list[str] | None) -> str:
    return results[0] if results else ""


def process_results(doc: Mapping[str, Any], results: list[str]) -> dict[str, Any]:
    """Box -> original pixels -> IoU against ``gt_box``; metrics acc50/iou/parse_failure/mislocated + record."""
    resolved = _scoring_convention(doc)
    size = (int(doc["image_width"]), int(doc["image_height"]))
    text = _reply(results)
    reading = resolved.convention.read_box(text, size, **resolved.params)
    score = iou(reading.box, doc["gt_box"]) if reading.box is not None else 0.0
    result = grounding_result(image_id=doc["image_id"], pred_box=reading.box, gt_box=doc["gt_box"], iou=score,
                              n_boxes=reading.n_boxes, convention=resolved.name, convention_source=resolved.source,
                              image_size=size, raw=text, expression=doc["expression"],
                              question_id=doc.get("question_id"))
    return with_clusters(result, GROUNDING_METRICS, "acc50")  # lmms-eval's clustered SE over images (cluster_key)


# ------------------------------------------------------------------------------------------------ pointing
def point_doc_to_text(doc: Mapping[str, Any], lmms_eval_specific_kwargs: Mapping[str, Any] | None = None) -> str:
    """The resolved convention's pointing request for the target description (RoboRefer's Qwen-style prompt)."""
    resolved = _convention_for(doc, lmms_eval_specific_kwargs)
    return resolved.convention.pointing_prompt(doc["expression"])


def mask_array(mask) -> np.ndarray:
    """Binary H x W array from a mask image: any nonzero pixel of the first channel is inside, as RoboRefer's
    Evaluation/summarize_acc.py reads RefSpatial masks (``mask = (np.array(mask) / 255. > 0)``)."""
    arr = np.asarray(mask)
    if arr.ndim == 3:
        arr = arr[:, :, 0]
    return arr > 0 if arr.dtype != bool else arr


def points_in_mask(points, mask: np.ndarray) -> float:
    """Mean over points of mask[y, x]; points outside the image count 0 (RoboRefer's summarize_acc)."""
    if not points:
        return 0.0
    h, w = mask.shape
    hits = [bool(mask[int(y), int(x)]) if 0 <= x < w and 0 <= y < h else False for x, y in points]
    return float(np.mean(hits))


def point_process_results(doc: Mapping[str, Any], results: list[str]) -> dict[str, Any]:
    resolved = _scoring_convention(doc)
    mask = mask_array(doc["mask"])
    size = (mask.shape[1], mask.shape[0])
    text = _reply(results)
    reading = resolved.convention.read_points(text, size, **resolved.params)
    return pointing_result(image_id=doc["image_id"], points=reading.points, score=points_in_mask(reading.points, mask),
                           from_boxes=reading.from_boxes, convention=resolved.name,
                           convention_source=resolved.source, image_size=size, raw=text,
                           expression=doc["expression"], question_id=doc.get("question_id"))
