"""One doc set per model x task, and pairs that cannot silently go wrong.

Every run of a model x task must score the same docs, so that every number in a row (accuracy, drop, test) and every
comparison across rows (top-k vs random draws) uses one doc set. Differing doc sets are an error naming the runs and
their counts, unless the user asks for the intersection (`--intersection`), which restricts *every* run to the docs
all of them share and is stated in the report. A `doc_id` must also mean the same document in every run: the runs
are compared on the image id and on every field that identifies a doc where both runs' lines carry it (`doc_hash`,
`target`, `vrh_record.question_id`, `vrh_record.expression`), so a run whose docs were shuffled within images, or
renumbered, is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.runfolder.samples import SampleTable, same_identity

_LISTED = 6  # runs named in a doc-set error before "and N more"


@dataclass
class DocSet:
    """The docs every statistic of a model x task uses, in the reference run's file order."""

    doc_ids: list[str]
    restricted: bool  # True when some run had docs outside this set (only with --intersection)
    per_run: dict[str, int]  # docs in each run's samples file, by label
    checked_on: list[str]  # fields compared between runs besides doc_id

    def to_dict(self) -> dict:
        return {"n_docs": len(self.doc_ids), "restricted": self.restricted, "per_run": dict(self.per_run),
                "checked_on": list(self.checked_on)}


@dataclass
class Paired:
    """Outcomes of the baseline and one configuration on the group's doc set; `clusters` None without image ids."""

    doc_ids: list[str]
    baseline: np.ndarray
    other: np.ndarray
    clusters: list[str] | None
    baseline_status: list[str] | None
    other_status: list[str] | None

    @property
    def n(self) -> int:
        return len(self.doc_ids)


def _doc_set_error(where: str, labels: list[str], tables: list[SampleTable], ref: int, common: int) -> VRHError:
    ref_docs = set(tables[ref].doc_ids)
    parts = [f"{labels[ref]}: {len(ref_docs)} docs"]
    differing = [i for i, t in enumerate(tables) if i != ref and set(t.doc_ids) != ref_docs]
    for i in differing[:_LISTED]:
        docs = set(tables[i].doc_ids)
        parts.append(f"{labels[i]}: {len(docs)} docs ({len(ref_docs - docs)} of {labels[ref]}'s missing, "
                     f"{len(docs - ref_docs)} others)")
    if len(differing) > _LISTED:
        parts.append(f"and {len(differing) - _LISTED} more")
    return VRHError(f"{where}: the runs do not score the same docs ({'; '.join(parts)}). Every number of a model x "
                    f"task must come from one doc set: rerun the incomplete configurations, or pass --intersection to "
                    f"restrict every run to the {common} docs all of them share (the report then says so)")


def _informative(values: list) -> bool:
    """A hash identifies docs only if every line has one and it is not one value for all (lmms-eval 0.7.3 hashes
    `Instance.doc`, which is None, so its `doc_hash` is the same on every line)."""
    present = [v for v in values if v is not None]
    return len(present) == len(values) and (len(set(map(str, present))) > 1 or len(present) == 1)


def _check_same_documents(where: str, ref_label: str, ref: SampleTable, label: str, other: SampleTable) -> list[str]:
    """Refuse a pair of runs whose doc ids point at different documents; return the fields compared."""
    checks: list[tuple[str, list, list]] = []
    if ref.image_ids is not None and other.image_ids is not None:
        checks.append(("vrh_record.image_id", ref.image_ids, other.image_ids))
    for name, values in ref.identity.items():
        theirs = other.identity.get(name)
        if theirs is None:
            continue
        if name == "doc_hash":
            if _informative(values) and _informative(theirs):
                checks.append((name, values, theirs))
            continue
        if any(v is not None for v in values) and any(v is not None for v in theirs):
            checks.append((name, values, theirs))
    for name, mine, theirs in checks:
        bad = [i for i, (x, y) in enumerate(zip(mine, theirs, strict=True))
               if x is not None and y is not None and not same_identity(x, y)]
        if bad:
            i = bad[0]
            raise VRHError(
                f"{where}: doc_id {ref.doc_ids[i]} is not the same document in {ref_label} ({ref.path}) and {label} "
                f"({other.path}): {name} {mine[i]!r} vs {theirs[i]!r} ({len(bad)} of {len(mine)} docs differ). These "
                f"runs did not score the same documents under the same ids (docs reordered, shuffled or renumbered "
                f"between runs?), so they cannot be paired"
            )
    return [name for name, _, _ in checks]


def align(where: str, labels: list[str], tables: list[SampleTable], ref: int,
          intersection: bool) -> tuple[DocSet, list[SampleTable]]:
    """Restrict every table to the group's doc set (reference order) and check every run against the reference."""
    ref_table = tables[ref]
    shared = set(ref_table.doc_ids)
    for t in tables:
        shared &= set(t.doc_ids)
    differs = any(len(t.doc_ids) != len(shared) for t in tables)
    if differs and not intersection:
        raise _doc_set_error(where, labels, tables, ref, len(shared))
    if not shared:
        raise VRHError(f"{where}: the runs have no doc_id in common ({', '.join(labels)})")
    doc_ids = [d for d in ref_table.doc_ids if d in shared]
    aligned = []
    for t in tables:
        index = t.index()
        aligned.append(t.subset([index[d] for d in doc_ids]))
    checked: list[str] = []
    for i, t in enumerate(aligned):
        if i != ref:
            for name in _check_same_documents(where, labels[ref], aligned[ref], labels[i], t):
                if name not in checked:
                    checked.append(name)
    per_run = {label: len(t.doc_ids) for label, t in zip(labels, tables, strict=True)}
    return DocSet(doc_ids, differs, per_run, checked), aligned


def pair(base: SampleTable, other: SampleTable) -> Paired:
    """Two aligned tables (same docs, same order) as baseline / configuration outcomes."""
    if base.doc_ids != other.doc_ids:
        raise ValueError("pair() needs tables aligned on the same doc ids; call align() first")
    clusters = base.image_ids if base.image_ids is not None else other.image_ids
    return Paired(list(base.doc_ids), base.scores, other.scores, None if clusters is None else list(clusters),
                  base.statuses, other.statuses)
