"""Per-sample outcomes of one run from its lmms-eval samples JSONL.

Outcomes come from `vrh_record` (docs/contracts.md): score = `correct`, plus `status` for the failure taxonomy and
`image_id` for clustering. Plain lmms-eval tasks have no `vrh_record`; `--score-field NAME` (dotted for nesting,
e.g. `vrh_record.iou`) reads a numeric per-sample field instead.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vrh_lmms.errors import VRHError

STATUSES = {
    "grounding": ("correct", "mislocated", "parse_failure"),
    "vqa": ("correct", "wrong", "parse_failure"),
}


@dataclass
class SampleTable:
    """Outcomes of one run, one row per doc, in file order; `doc_ids` are strings so int/str ids pair alike."""

    path: Path
    doc_ids: list[str]
    scores: np.ndarray
    statuses: list[str] | None
    image_ids: list[str] | None
    kind: str  # "grounding", "vqa" or "score"
    raw_lines: list[dict] | None = None

    def index(self) -> dict[str, int]:
        return {doc: i for i, doc in enumerate(self.doc_ids)}


def _lookup(line: dict, dotted: str) -> Any:
    value: Any = line
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


_MISSING = object()


def _as_score(value: Any, where: str) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(float(value)):
        return float(value)
    raise VRHError(f"{where}: expected a finite number, got {value!r}")


def read_samples(path: Path, score_field: str | None = None, keep_lines: bool = False) -> SampleTable:
    """Read one samples JSONL; raise VRHError naming the file, line and field of anything malformed."""
    doc_ids: list[str] = []
    scores: list[float] = []
    statuses: list[str] = []
    image_ids: list[str | None] = []
    kinds: set[str] = set()
    lines: list[dict] = []
    has_record = None
    try:
        handle = open(path, encoding="utf-8")
    except OSError as exc:
        raise VRHError(f"{path}: cannot read ({exc.strerror})") from exc
    with handle:
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            where = f"{path}:{number}"
            try:
                line = json.loads(text)
            except json.JSONDecodeError as exc:
                raise VRHError(f"{where}: not valid JSON ({exc.msg})") from exc
            if not isinstance(line, dict) or "doc_id" not in line:
                raise VRHError(f"{where}: sample line has no doc_id")
            record = line.get("vrh_record")
            if has_record is None:
                has_record = isinstance(record, dict)
            elif has_record != isinstance(record, dict):
                raise VRHError(f"{where}: vrh_record present on some lines and missing on others")
            if record is None and score_field is None:
                raise VRHError(
                    f"{where}: no vrh_record in this sample line; pass --score-field NAME to read a numeric "
                    f"per-sample field of a plain lmms-eval task"
                )
            if score_field is not None:
                value = _lookup(line, score_field)
                if value is _MISSING:
                    raise VRHError(f"{where}: field {score_field} not found in the sample line")
                scores.append(_as_score(value, f"{where}: field {score_field}"))
            else:
                if "correct" not in record:
                    raise VRHError(f"{where}: field vrh_record.correct is missing")
                scores.append(_as_score(record["correct"], f"{where}: field vrh_record.correct"))
            if has_record:
                kind = record.get("kind")
                if kind not in STATUSES:
                    raise VRHError(f"{where}: field vrh_record.kind is {kind!r}; expected grounding or vqa")
                status = record.get("status")
                if status not in STATUSES[kind]:
                    raise VRHError(
                        f"{where}: field vrh_record.status is {status!r}; expected one of {', '.join(STATUSES[kind])}"
                    )
                kinds.add(kind)
                statuses.append(status)
                image = record.get("image_id")
                image_ids.append(None if image is None else str(image))
            doc_ids.append(str(line["doc_id"]))
            if keep_lines:
                lines.append(line)
    if not doc_ids:
        raise VRHError(f"{path}: no samples in the file")
    if len(kinds) > 1:
        raise VRHError(f"{path}: mixes vrh_record kinds {sorted(kinds)}")
    seen: set[str] = set()
    for doc in doc_ids:
        if doc in seen:
            raise VRHError(f"{path}: doc_id {doc} appears more than once (one line per document expected)")
        seen.add(doc)
    has_images = bool(has_record) and all(i is not None for i in image_ids)
    return SampleTable(
        path=path,
        doc_ids=doc_ids,
        scores=np.asarray(scores, dtype=float),
        statuses=statuses if has_record else None,
        image_ids=[str(i) for i in image_ids] if has_images else None,
        kind=kinds.pop() if kinds else "score",
        raw_lines=lines if keep_lines else None,
    )
