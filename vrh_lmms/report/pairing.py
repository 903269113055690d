"""Pair two runs of the same model and task on `doc_id`, keeping image ids for clustered resampling."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vrh_lmms.errors import VRHError
from vrh_lmms.report.samples import SampleTable


@dataclass
class Paired:
    """Outcomes of the docs both runs scored, in baseline order; `clusters` is None when image ids are unknown."""

    doc_ids: list[str]
    baseline: np.ndarray
    other: np.ndarray
    clusters: list[str] | None
    baseline_status: list[str] | None
    other_status: list[str] | None
    n_baseline: int
    n_other: int

    @property
    def n(self) -> int:
        return len(self.doc_ids)


def pair(base: SampleTable, other: SampleTable) -> Paired:
    """Intersection of doc ids; refuse pairs whose image ids disagree (the runs scored different documents)."""
    where = other.index()
    bi = [i for i, doc in enumerate(base.doc_ids) if doc in where]
    oi = [where[base.doc_ids[i]] for i in bi]
    if base.image_ids is not None and other.image_ids is not None:
        for i, j in zip(bi, oi, strict=True):
            if base.image_ids[i] != other.image_ids[j]:
                raise VRHError(
                    f"doc_id {base.doc_ids[i]} has image_id {base.image_ids[i]!r} in {base.path} but "
                    f"{other.image_ids[j]!r} in {other.path}: these runs did not score the same documents"
                )
    if base.image_ids is not None:
        clusters = [base.image_ids[i] for i in bi]
    elif other.image_ids is not None:
        clusters = [other.image_ids[j] for j in oi]
    else:
        clusters = None
    return Paired(
        doc_ids=[base.doc_ids[i] for i in bi],
        baseline=base.scores[bi],
        other=other.scores[oi],
        clusters=clusters,
        baseline_status=None if base.statuses is None else [base.statuses[i] for i in bi],
        other_status=None if other.statuses is None else [other.statuses[j] for j in oi],
        n_baseline=len(base.doc_ids),
        n_other=len(other.doc_ids),
    )
