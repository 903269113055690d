"""Leave out the docs a heads file was found on (`vrh-lmms sweep --exclude-discovery-docs`).

The paper detects its heads on the first 200 RefCOCO val samples and evaluates on the disjoint rest (Table A10
compares with and without them). Discovery runs lmms-eval with `--limit N`, so its docs are a task's first N doc
ids; a sweep leaves them out with lmms-eval's own `offset`, which keeps the dataset's doc ids (runs stay paired
with earlier runs and with discovery's own samples). Tasks discovery did not use are evaluated whole.

Where the doc ids come from: the heads file's `discovery_docs` block (written by every discovery), else the keys
of the per-sample statistics file beside it (`scoring.samples_file`), which every discovery writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vrh_lmms.base.errors import VRHError


def discovery_docs(hf) -> dict[str, list[int]]:
    """Task -> sorted doc ids discovery scored, from a loaded HeadsFile."""
    block = hf.extra.get("discovery_docs")
    if isinstance(block, dict) and block:
        out = {}
        for task, entry in block.items():
            ids = entry.get("doc_ids") if isinstance(entry, dict) else None
            if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
                raise VRHError(f"{hf.path}: field discovery_docs.{task}.doc_ids must be a list of integers")
            out[task] = sorted(ids)
        return out
    return _from_samples_file(hf)


def _from_samples_file(hf) -> dict[str, list[int]]:
    name = (hf.scoring or {}).get("samples_file")
    where = Path(hf.path).parent / name if hf.path is not None and name else None
    if where is None or not where.is_file():
        raise VRHError(f"{hf.path}: the heads file does not say which docs discovery used (no discovery_docs block, "
                       f"and its samples file {name or '(unnamed)'} is not beside it); rerun `vrh-lmms discover`")
    # deferred: keeps `vrh-lmms report` free of torch
    from vrh_lmms.runs.discovery.run import discovery_docs_block

    with np.load(where) as data:
        keys = [str(k) for k in data["keys"]]
    return {task: entry["doc_ids"] for task, entry in discovery_docs_block(keys).items()}


def offsets_for(tasks: Sequence[str], docs: dict[str, list[int]], where: str) -> dict[str, int]:
    """Per swept task, how many leading docs to skip: N where discovery used exactly docs 0..N-1 of it. A task
    whose discovery docs are not such a prefix cannot be left out by an offset, so it is refused."""
    out = {}
    for task in tasks:
        ids = docs.get(task)
        if not ids:
            continue
        if ids != list(range(len(ids))):
            raise VRHError(f"{where}: discovery used docs of {task} that are not its first {len(ids)} "
                           f"(e.g. doc {next(i for n, i in enumerate(ids) if n != i)}); --exclude-discovery-docs "
                           "needs discovery run with --limit")
        out[task] = len(ids)
    return out


def exclusion_record(offsets: dict[str, int], heads_file: str | None) -> dict[str, Any]:
    """The `excluded_docs` block of a run's `vrh` record and of the sweep manifest."""
    return {"rule": "discovery docs left out (doc ids below `first_doc` of each task)", "heads_file": heads_file,
            "tasks": {t: {"first_doc": n} for t, n in offsets.items()}}
