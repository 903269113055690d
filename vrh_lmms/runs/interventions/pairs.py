"""Other objects of the same image: steering targets (a distractor per doc) and patching pairs (A, B).

Grounding benchmarks list one doc per referring expression, several per image (RefCOCO: every annotated object of
an image, often with several sentences each). Two docs of the same image name *different* objects when their boxes
overlap with IoU < 0.5; docs naming the same object (IoU >= 0.5) are never paired. Everything is deterministic:
a seeded choice per doc, pairs in doc order.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from vrh_lmms.base.boxes.geometry import iou
from vrh_lmms.base.errors import VRHError
from vrh_lmms.runs.discovery.targets import Target, target_from_doc

SAME_OBJECT_IOU = 0.5
_MEDIA = ("image", "images", "mask", "video")


def split_targets(docs: Any, where: str = "task") -> dict[int, Target]:
    """doc_id -> Target for every doc of one task split (lmms-eval's doc ids are the row indices); images are decoded
    only for docs that state no image size."""
    columns = getattr(docs, "column_names", None)
    if columns is not None:
        rows = docs.select_columns([c for c in columns if c not in _MEDIA]).to_list()
    else:
        rows = list(docs)
    out = {}
    for i, row in enumerate(rows):
        try:
            out[i] = target_from_doc(row, where=f"{where} doc {i}")
        except VRHError:
            out[i] = target_from_doc(docs[i], where=f"{where} doc {i}")
    return out


class ObjectIndex:
    """The docs of each image, for finding other objects of a doc's image."""

    def __init__(self, targets: Mapping[int, Target]) -> None:
        self.targets = dict(targets)
        groups: dict[str, list[int]] = defaultdict(list)
        for doc_id in sorted(self.targets):
            image = self.targets[doc_id].image_id
            if image:  # docs without an image id are never grouped
                groups[image].append(doc_id)
        self.groups = dict(groups)

    def others(self, doc_id: int) -> list[int]:
        """Docs of the same image naming another object, one per distinct box (the first doc naming it)."""
        t = self.targets[doc_id]
        chosen: list[int] = []
        for other in self.groups.get(t.image_id, []) if t.image_id else []:
            box = self.targets[other].box
            if other == doc_id or iou(box, t.box) >= SAME_OBJECT_IOU:
                continue
            if any(iou(box, self.targets[c].box) >= SAME_OBJECT_IOU for c in chosen):
                continue
            chosen.append(other)
        return chosen

    def distractor(self, doc_id: int, seed: int = 0) -> int | None:
        """A seeded choice among the other objects of the doc's image (None when there is none)."""
        options = self.others(doc_id)
        if not options:
            return None
        return options[int(np.random.default_rng([seed, doc_id]).integers(len(options)))]

    def pairs(self, eligible: Iterable[int], per_image: int = 2, max_pairs: int | None = None,
              ) -> list[tuple[int, int]]:
        """Ordered pairs (A, B) of eligible docs of one image naming different objects: per image the first
        `per_image` of them in doc order, images in order of their first doc; at most `max_pairs` in all."""
        if per_image < 1:
            raise VRHError(f"pairs per image must be >= 1, got {per_image}")
        keep = set(eligible)
        out: list[tuple[int, int]] = []
        for docs in self.groups.values():
            docs = [d for d in docs if d in keep]
            pairs = [(a, b) for a, b in itertools.permutations(docs, 2)
                     if iou(self.targets[a].box, self.targets[b].box) < SAME_OBJECT_IOU]
            out.extend(pairs[:per_image])
            if max_pairs is not None and len(out) >= max_pairs:
                return out[:max_pairs]
        return out
