"""Sharper controls for sweeps: heads matched to the top heads on attention to the image, not to the box.

Random heads are a weak control: most of them barely look at the image, so losing them says little. An
image-matched head looks at the image as much as the top head it stands in for (its mean attention mass on all image
tokens from the answer rows, the heads file's `image_mass`, differs by at most `tolerance`) but is not
box-specific: it lies outside the top 2k of the ranking. If ablating these hurts far less than ablating the top-k,
what the top heads do is reading the box, not attending to the image.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import Geometry, HeadRef


def image_matched_heads(ranking: Sequence[HeadRef], image_mass: np.ndarray, geometry: Geometry, k: int, seed: int,
                        tolerance: float, exclude: frozenset[HeadRef] = frozenset()) -> list[HeadRef]:
    """One head per top-k head (in rank order), drawn uniformly among the heads outside the top 2k (and outside
    `exclude`, the dead heads of a live pool) whose image mass is within `tolerance` of it and that are not drawn
    yet. Refuses, naming the head, when none is left."""
    if tolerance < 0:
        raise VRHError(f"image-matched tolerance must be >= 0, got {tolerance}")
    mass = np.asarray(image_mass, dtype=float)
    if mass.shape != (geometry.layers, geometry.heads):
        raise VRHError(f"image mass has shape {mass.shape}, the model {geometry.layers} x {geometry.heads}")
    top = list(ranking[:k])
    excluded = set(ranking[:2 * k])
    pool = [h for h in geometry.all_heads() if h not in excluded and h not in exclude]
    rng = np.random.default_rng(seed)
    chosen: list[HeadRef] = []
    for head in top:
        target = mass[head.layer, head.head]
        free = [h for h in pool if h not in chosen]
        near = [h for h in free if abs(mass[h.layer, h.head] - target) <= tolerance]
        if not near:
            closest = min((abs(mass[h.layer, h.head] - target) for h in free), default=float("nan"))
            raise VRHError(f"image-matched control impossible for {head} (image mass {target:.3f}): no head outside "
                           f"the top {2 * k} within {tolerance:g} (closest {closest:.3f}); raise the tolerance "
                           f"(image_matched:top{k}~T, --control-tolerance) or use a smaller k")
        chosen.append(near[int(rng.integers(len(near)))])
    return sorted(chosen)
