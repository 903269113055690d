"""Heads files (`vrh-heads/1`) for score heatmaps and the top-k overlap matrix, read with the shared reader
(`vrh_lmms.heads.heads_file.load_heads_file`), which validates the schema and names bad fields."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vrh_lmms.errors import VRHError
from vrh_lmms.heads.heads_file import load_heads_file
from vrh_lmms.report.runs import short_model
from vrh_lmms.stats import topk_jaccard_matrix


@dataclass
class HeadsFile:
    """What the report uses of a heads file."""

    path: Path
    model: str
    scores: np.ndarray  # layers x heads
    ranking: list[str]


def read_heads_file(path: str | Path) -> HeadsFile:
    hf = load_heads_file(path)
    model = hf.model.get("id")
    if not isinstance(model, str) or not model:
        raise VRHError(f"heads file {path}: field 'model.id' is missing")
    return HeadsFile(Path(path), model, np.asarray(hf.scores, dtype=float), [str(h) for h in hf.ranking])


def labels_for(files: list[HeadsFile]) -> list[str]:
    """Short model names; files of the same model are told apart by file name."""
    names = [short_model(f.model) for f in files]
    return [f"{n} ({f.path.stem})" if names.count(n) > 1 else n for n, f in zip(names, files, strict=True)]


def overlap_block(files: list[HeadsFile], ks: list[int]) -> dict:
    """Jaccard index of the top-k heads of every pair of files, for each k."""
    return {
        "labels": labels_for(files),
        "files": [str(f.path) for f in files],
        "models": [f.model for f in files],
        "k": list(ks),
        "jaccard": {str(k): topk_jaccard_matrix([f.ranking for f in files], k).tolist() for k in ks},
    }
