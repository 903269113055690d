"""Per-sample ``vrh_record`` dicts and scalar metrics (docs/contracts.md), shared by every vrh task."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

GROUNDING_METRICS = ("acc50", "iou", "parse_failure", "mislocated")
POINTING_METRICS = ("acc", "parse_failure", "mislocated")
VQA_METRICS = ("acc", "parse_failure")
RAW_LIMIT = 2000  # characters of model output kept in a record
# The tasks' `cluster_key` (lmms-eval 0.7.3, evaluator_utils.TaskOutput.calculate_clt_aggregate_metric): docs about one
# image are not independent, so lmms-eval's results carry `<metric>_stderr_clustered` over images beside the naive
# `<metric>_stderr_clt`. lmms-eval reads the cluster from each per-doc metric item, which must be a dict holding its
# `score_key` ("score") and this field; a plain number counts as a cluster of its own.
CLUSTER_KEY = "image_id"
SCORE_KEY = "score"


def _round(values: Sequence[float] | None, digits: int = 2) -> list[float] | None:
    return None if values is None else [round(float(v), digits) for v in values]


def grounding_result(*, image_id: str, pred_box: Sequence[float] | None, gt_box: Sequence[float], iou: float,
                     n_boxes: int, convention: str, convention_source: str, image_size: Sequence[int], raw: str,
                     expression: str, question_id: str | None = None, threshold: float = 0.5) -> dict[str, Any]:
    """Scalar metrics plus the grounding ``vrh_record`` for one doc."""
    parsed = pred_box is not None
    correct = parsed and iou >= threshold
    status = "correct" if correct else ("mislocated" if parsed else "parse_failure")
    record = {
        "kind": "grounding", "image_id": str(image_id), "pred_box": _round(pred_box), "gt_box": _round(gt_box),
        "iou": round(float(iou), 6), "correct": bool(correct), "status": status, "n_boxes": int(n_boxes),
        "convention": convention, "convention_source": convention_source,
        "image_size": [int(image_size[0]), int(image_size[1])], "raw": (raw or "")[:RAW_LIMIT],
        "expression": expression, "question_id": None if question_id is None else str(question_id),
    }
    return {"acc50": float(correct), "iou": float(iou), "parse_failure": float(not parsed),
            "mislocated": float(parsed and not correct), "vrh_record": record}


def pointing_result(*, image_id: str, points: Sequence[Sequence[float]], score: float, from_boxes: bool,
                    convention: str, convention_source: str, image_size: Sequence[int], raw: str, expression: str,
                    question_id: str | None = None) -> dict[str, Any]:
    """Point-in-mask scoring (RefSpatial): ``score`` is the share of predicted points inside the mask."""
    parsed = bool(points)
    correct = parsed and score >= 0.5
    status = "correct" if correct else ("mislocated" if parsed else "parse_failure")
    record = {
        "kind": "pointing", "image_id": str(image_id), "pred_points": [_round(p) for p in points],
        "score": round(float(score), 6), "correct": bool(correct), "status": status, "n_points": len(points),
        "points_from_boxes": bool(from_boxes), "convention": convention, "convention_source": convention_source,
        "image_size": [int(image_size[0]), int(image_size[1])], "raw": (raw or "")[:RAW_LIMIT],
        "expression": expression, "question_id": None if question_id is None else str(question_id),
    }
    return {"acc": float(score), "parse_failure": float(not parsed), "mislocated": float(parsed and not correct),
            "vrh_record": record}


def vqa_result(*, image_id: str, pred: str | None, target: str, correct: bool, raw: str, question_type: str,
               question_id: str | None = None, **extra: Any) -> dict[str, Any]:
    """Scalar metrics plus the VQA ``vrh_record``; ``pred=None`` means no answer could be read."""
    parsed = pred is not None
    status = "correct" if (parsed and correct) else ("wrong" if parsed else "parse_failure")
    record = {"kind": "vqa", "image_id": str(image_id), "correct": bool(parsed and correct), "status": status,
              "pred": pred, "target": str(target), "raw": (raw or "")[:RAW_LIMIT], "question_type": question_type,
              "question_id": None if question_id is None else str(question_id), **extra}
    return {"acc": float(parsed and correct), "parse_failure": float(not parsed), "vrh_record": record}


def with_clusters(result: Mapping[str, Any], metrics: Sequence[str], headline: str) -> dict[str, Any]:
    """A result of this module as lmms-eval's clustered-SE items: each metric `{"score": value, "image_id": id}`
    (aggregated by `mean_score`), plus `score`, the headline metric per doc as a number: the field lmms-eval's
    `--baseline` pairs two runs' docs on (its `score_key`, and the first field named *score* it finds in a baseline
    samples file). The vrh_record is unchanged; vrh-lmms reads outcomes from it."""
    image = str(result["vrh_record"]["image_id"])
    out: dict[str, Any] = {name: {SCORE_KEY: float(result[name]), CLUSTER_KEY: image} for name in metrics}
    return {**out, SCORE_KEY: float(result[headline]), "vrh_record": result["vrh_record"]}


def mean_score(items: Iterable[Any]) -> float:
    """The `aggregation` of a metric written by `with_clusters`: the mean of its scores (a plain number, as an
    earlier version wrote, is read as its own score)."""
    values = [float(x[SCORE_KEY]) if isinstance(x, Mapping) else float(x) for x in items]
    return sum(values) / len(values) if values else float("nan")
