"""Evaluate a configuration on a fixed subset of a task's docs (`vrh-lmms sweep --control-docs N`).

lmms-eval selects docs only by `limit` / `offset`. A subset of doc ids is evaluated by letting the task build its
requests as usual and keeping those of the subset's docs (`restrict_docs`): the evaluator's post-processing skips
docs without requests, so every sample keeps the dataset's own `doc_id` (runs on the subset pair with runs on all
docs), the backend reads the same docs under the same ids, and the metrics are the task's own aggregation over the
subset. The one field the restriction cannot set itself, `n-samples.<task>.effective`, is set to the subset's size
(`count_subset`); `n-samples.<task>.original` stays the task's doc count. tests/integration/test_control_docs.py
compares the files with lmms-eval's evaluator on a task whose dataset holds only those docs.

The image of a doc is the task's `image_id` field (every vrh task has one); a task without it treats each doc as its
own image.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from lmms_eval.api.task import Task

from vrh_lmms.harness.lmms import leaf_tasks, limited


def doc_images(tm, tasks: list[str], limit: int | float | None = None,
               offsets: Mapping[str, int] | None = None) -> dict[str, tuple[list[int], list[str]]]:
    """Leaf task -> (doc ids an evaluator pass with this `limit` and the task's `offsets` entry reads, the image id
    of each): what a subset is drawn from. The image ids are read from the dataset's column where it has one (no
    image is decoded)."""
    out = {}
    for task in tasks:
        for name, leaf in leaf_tasks(tm, task):
            docs = leaf.eval_docs_no_media if hasattr(leaf, "eval_docs_no_media") else leaf.eval_docs
            first = int((offsets or {}).get(task, (offsets or {}).get(name, 0)))
            n = min(len(docs), first + limited(len(docs), limit))
            ids = list(range(min(first, n), n))
            column = docs["image_id"] if "image_id" in (getattr(docs, "column_names", None) or ()) else None
            images = [str(column[i]) if column is not None else _image_of(docs[i], i) for i in ids]
            out[name] = (ids, images)
    return out


def _image_of(doc: Any, doc_id: int) -> str:
    value = doc.get("image_id") if isinstance(doc, dict) else None
    return f"doc:{doc_id}" if value in (None, "") else str(value)


@contextmanager
def restrict_docs(subsets: Mapping[str, set[int] | list[int]] | None) -> Iterator[None]:
    """While active, the evaluator's passes of the tasks named in `subsets` (leaf task -> doc ids) evaluate only
    those docs; other tasks are untouched. None or {}: nothing changes."""
    if not subsets:
        yield
        return
    keep = {task: set(int(i) for i in ids) for task, ids in subsets.items()}
    original = Task.build_all_requests

    def build_all_requests(self, *args, **kwargs):
        original(self, *args, **kwargs)
        wanted = keep.get(getattr(self.config, "task", None))
        if wanted is not None:
            self._instances = [inst for inst in self._instances if inst.doc_id in wanted]

    Task.build_all_requests = build_all_requests
    try:
        yield
    finally:
        Task.build_all_requests = original


def count_subset(results: dict[str, Any] | None, subsets: Mapping[str, set[int] | list[int]] | None) -> None:
    """`n-samples.<task>.effective` of an evaluator pass under `restrict_docs`: the docs it evaluated."""
    if not results or not subsets:
        return
    for task, ids in subsets.items():
        entry = (results.get("n-samples") or {}).get(task)
        if isinstance(entry, dict):
            entry["effective"] = min(len(set(ids)), int(entry.get("effective", len(set(ids)))))
