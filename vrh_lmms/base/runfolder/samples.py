"""Per-sample outcomes of one run from its lmms-eval samples JSONL.

Outcomes come from `vrh_record` (docs/contracts.md): score = `correct`, plus `status` for the failure taxonomy and
`image_id` for clustering. Plain lmms-eval tasks have no `vrh_record`; `--score-field NAME` (dotted for nesting,
e.g. `vrh_record.iou`) reads a numeric per-sample field instead. What identifies a document beyond its `doc_id`
(`IDENTITY_FIELDS`: lmms-eval's `doc_hash` and `target`, the record's `question_id` and `expression`) is kept so that
pairing can check two runs scored the same document under each id.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vrh_lmms.base.errors import VRHError

STATUSES = {
    "grounding": ("correct", "mislocated", "parse_failure"),
    "pointing": ("correct", "mislocated", "parse_failure"),  # RefSpatial-style points in a mask
    "vqa": ("correct", "wrong", "parse_failure"),
}


# Fields that identify a document, as (name in reports and errors, where it sits in a sample line).
IDENTITY_FIELDS = (
    ("doc_hash", ("doc_hash",)),
    ("target", ("target",)),
    ("vrh_record.question_id", ("vrh_record", "question_id")),
    ("vrh_record.expression", ("vrh_record", "expression")),
)


@dataclass
class SampleTable:
    """Outcomes of one run, one row per doc, in file order; `doc_ids` are strings so int/str ids pair alike.
    `identity` maps each of IDENTITY_FIELDS to its per-doc values (None where a line lacks it)."""

    path: Path
    doc_ids: list[str]
    scores: np.ndarray
    statuses: list[str] | None
    image_ids: list[str] | None
    kind: str  # "grounding", "pointing", "vqa" or "score" (no vrh_record)
    raw_lines: list[dict] | None = None
    identity: dict[str, list[Any]] = field(default_factory=dict)
    conventions: tuple[str, ...] = ()  # the box conventions its answers were read in (vrh_record.convention)

    def index(self) -> dict[str, int]:
        return {doc: i for i, doc in enumerate(self.doc_ids)}

    def subset(self, rows: list[int]) -> SampleTable:
        """The same run restricted to `rows` (positions in this table), in that order."""
        def pick(values):
            return None if values is None else [values[i] for i in rows]

        return SampleTable(self.path, pick(self.doc_ids), self.scores[rows], pick(self.statuses), pick(self.image_ids),
                           self.kind, pick(self.raw_lines), {k: pick(v) for k, v in self.identity.items()},
                           self.conventions)


def _lookup(line: dict, dotted: str) -> Any:
    value: Any = line
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


_MISSING = object()


def _as_score(value: Any, where: str) -> float:
    if isinstance(value, dict) and "score" in value:  # lmms-eval's clustered-SE item: {"score": x, <cluster_key>: id}
        value = value["score"]
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(float(value)):
        return float(value)
    raise VRHError(f"{where}: expected a finite number, got {value!r}")


@dataclass
class _Row:
    doc_id: str
    score: float
    kind: str | None
    status: str | None
    image_id: str | None
    identity: tuple[Any, ...] = ()
    convention: str | None = None


def _identity(line: dict, record: dict | None) -> tuple[Any, ...]:
    """Each identity field as written (compare with `same_identity`: plain lmms-eval files hold `str(target)`, sweep
    files the object itself)."""
    rec = record or {}
    return line.get("doc_hash"), line.get("target"), rec.get("question_id"), rec.get("expression")


def same_identity(a: Any, b: Any) -> bool:
    """Equal as written, or equal once the non-text one is written as lmms-eval writes it (`str(value)`)."""
    if a == b:
        return True
    if isinstance(a, str) != isinstance(b, str):
        return (a if isinstance(a, str) else str(a)) == (b if isinstance(b, str) else str(b))
    return False


def _parse_line(line: Any, where: str, score_field: str | None) -> _Row:
    """One sample line -> its outcome; every malformed field is named with file and line."""
    if not isinstance(line, dict) or "doc_id" not in line:
        raise VRHError(f"{where}: sample line has no doc_id")
    record = line.get("vrh_record")
    if record is not None and not isinstance(record, dict):
        raise VRHError(f"{where}: field vrh_record must be an object")
    if record is None and score_field is None:
        raise VRHError(f"{where}: no vrh_record in this sample line; pass --score-field NAME to read a numeric "
                       f"per-sample field of a plain lmms-eval task")
    if score_field is not None:
        value = _lookup(line, score_field)
        if value is _MISSING:
            raise VRHError(f"{where}: field {score_field} not found in the sample line")
        score = _as_score(value, f"{where}: field {score_field}")
    else:
        if "correct" not in record:
            raise VRHError(f"{where}: field vrh_record.correct is missing")
        score = _as_score(record["correct"], f"{where}: field vrh_record.correct")
    if record is None:
        return _Row(str(line["doc_id"]), score, None, None, None, _identity(line, record))
    kind = record.get("kind")
    if kind not in STATUSES:
        raise VRHError(f"{where}: field vrh_record.kind is {kind!r}; expected one of {', '.join(STATUSES)}")
    status = record.get("status")
    if status not in STATUSES[kind]:
        raise VRHError(f"{where}: field vrh_record.status is {status!r}; expected one of {', '.join(STATUSES[kind])}")
    image = record.get("image_id")
    image_id = None if image is None else str(image)
    convention = record.get("convention")
    return _Row(str(line["doc_id"]), score, kind, status, image_id, _identity(line, record),
                None if convention is None else str(convention))


def read_samples(path: Path, score_field: str | None = None, keep_lines: bool = False) -> SampleTable:
    """Read one samples JSONL; raise VRHError naming the file, line and field of anything malformed."""
    try:
        texts = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise VRHError(f"{path}: cannot read ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise VRHError(f"{path}: not UTF-8 text ({exc.reason})") from exc
    rows: list[_Row] = []
    lines: list[dict] = []
    seen: set[str] = set()
    for number, text in enumerate(texts, start=1):
        if not text.strip():
            continue
        where = f"{path}:{number}"
        try:
            line = json.loads(text)
        except json.JSONDecodeError as exc:
            raise VRHError(f"{where}: not valid JSON ({exc.msg})") from exc
        row = _parse_line(line, where, score_field)
        if rows and (row.kind is None) != (rows[0].kind is None):
            raise VRHError(f"{where}: vrh_record present on some lines and missing on others")
        if rows and row.kind != rows[0].kind:
            raise VRHError(f"{where}: vrh_record.kind {row.kind!r} differs from earlier lines ({rows[0].kind!r})")
        if row.doc_id in seen:
            raise VRHError(f"{where}: doc_id {row.doc_id} appears twice (one line per document expected)")
        seen.add(row.doc_id)
        rows.append(row)
        if keep_lines:
            lines.append(line)
    if not rows:
        raise VRHError(f"{path}: no samples in the file")
    has_record = rows[0].kind is not None
    image_ids = [r.image_id for r in rows]
    return SampleTable(
        path=path,
        doc_ids=[r.doc_id for r in rows],
        scores=np.asarray([r.score for r in rows], dtype=float),
        statuses=[r.status for r in rows] if has_record else None,
        image_ids=image_ids if has_record and all(i is not None for i in image_ids) else None,
        kind=rows[0].kind or "score",
        raw_lines=lines if keep_lines else None,
        identity={name: [r.identity[i] for r in rows] for i, (name, _) in enumerate(IDENTITY_FIELDS)},
        conventions=tuple(sorted({r.convention for r in rows if r.convention is not None})),
    )
