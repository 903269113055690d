"""Control configurations on a fixed seeded image subset of the docs (`vrh-lmms sweep --control-docs N`).

Three quarters of a replication's generations are control draws (docs/sweeps.md, "Control draws on fewer docs").
With `--control-docs N` every control configuration (random, random over all heads, random outside the top-k,
layer-matched, image-matched) is evaluated on one subset of each task's docs: whole images in a seeded random order
until N docs (vrh_lmms.base.stats.subsample.image_subsample, seeded by the sweep's `--seed`), the same subset for
every control, so the draws stay paired with each other. The baseline and the top-k configurations run on all docs;
the report compares a control's drop with the baseline restricted to the subset (`subsample_drop`).

The subset is part of the sweep's identity (N, and the seed already is): a folder swept with another N is refused
on resume, never mixed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import kinds
from vrh_lmms.base.heads.plan import Configuration


def is_control(cfg: Configuration) -> bool:
    """Whether a configuration is a control draw (a draw that stands for "any heads", vrh_lmms.base.heads.kinds), as
    opposed to the baseline, a top-k or explicit heads: `--control-docs` evaluates the controls on the subset."""
    return cfg.kind in kinds.CONTROLS


def check_control_docs(n: int | None) -> int | None:
    """`--control-docs`: None (every doc) or a positive doc count."""
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise VRHError(f"--control-docs {n!r}: expected a positive number of docs (default: every doc)")
    return n


@dataclass(frozen=True)
class ControlDocs:
    """The subset of each leaf task (doc ids, sorted) and what it was drawn from."""

    n: int
    seed: int
    tasks: dict[str, list[int]]
    counts: dict[str, dict[str, int]]  # per task: n_docs, n_images, all_docs, all_images

    def record(self) -> dict[str, Any]:
        """The `control_docs` block of sweep.json and `vrh.doc_subset` of every control's results.json."""
        return {"rule": "whole images in a seeded random order until n docs (image_subsample)", "n": self.n,
                "seed": self.seed, "tasks": {t: {"doc_ids": ids, **self.counts[t]} for t, ids in self.tasks.items()}}


def draw(images: dict[str, tuple[list[int], list[str]]], n: int, seed: int) -> ControlDocs:
    """The subset of each task from its docs' image ids (vrh_lmms.harness.doc_subset.doc_images)."""
    # deferred: keeps `vrh-lmms sweep --help` free of scipy, statsmodels
    from vrh_lmms.base.stats.subsample import image_subsample

    tasks, counts = {}, {}
    for task, (doc_ids, image_ids) in images.items():
        if not doc_ids:
            continue
        rows = image_subsample(image_ids, n, seed=seed)
        if len({image_ids[i] for i in rows}) < 2:
            raise VRHError(f"--control-docs {n}: the subset of {task} holds one image ({rows.size} docs); a "
                           "control's interval on the subset needs at least 2 images: ask for more docs")
        tasks[task] = [int(doc_ids[i]) for i in rows]
        counts[task] = {"n_docs": int(rows.size), "n_images": len({image_ids[i] for i in rows}),
                        "all_docs": len(doc_ids), "all_images": int(np.unique(image_ids).size)}
    return ControlDocs(n, seed, tasks, counts)
