"""A heads file of random scores for the tiny Qwen2.5-VL (tests/conftest.py `tiny_qwen25`) and the model args its
commands run with: what the integration tests of the one-result commands start from."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vrh_lmms.base.heads import Geometry
from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file

PIXELS = 224 * 224


def tiny_heads_and_args(checkpoint: Path, heads: Path) -> str:
    """Write a seeded random heads file for `checkpoint` to `heads`; return the model args to run it with."""
    scores = np.random.default_rng(2).random((2, 4))
    save_heads_file(HeadsFile({"id": str(checkpoint), "family": "qwen2_5_vl"}, Geometry(2, 4, 2, 16), scores,
                              ranking_from_scores(scores)), heads)
    return f"pretrained={checkpoint},dtype=float32,min_pixels={PIXELS},max_pixels={PIXELS}"
