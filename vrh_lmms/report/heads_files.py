"""Heads files (`vrh-heads/1`) for score heatmaps, the top-k overlap matrix and neutral names of head sets, read with
the shared reader (`vrh_lmms.base.heads.heads_file.load_heads_file`), which validates the schema and names bad
fields."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import kinds
from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.base.paths import shown_model, shown_path
from vrh_lmms.base.runfolder.runs import short_model
from vrh_lmms.base.stats import topk_jaccard_matrix


@dataclass
class HeadsFile:
    """What the report uses of a heads file; `scoring` is its primary cell, e.g. "out,sum,mean"."""

    path: Path
    model: str
    scores: np.ndarray  # layers x heads
    ranking: list[str]
    sha256: str | None = None
    scoring: str | None = None
    total_heads: int | None = None  # heads the decoder has (a hybrid's attention layers only); None: layers x heads

    @property
    def n_heads(self) -> int:
        return self.total_heads if self.total_heads is not None else int(self.scores.size)


def _scoring(block: dict) -> str | None:
    cell = block.get("cell")
    if isinstance(cell, str) and cell:
        return cell
    parts = [block.get(k) for k in ("query", "key", "aggregate")]
    return ",".join(parts) if all(isinstance(p, str) and p for p in parts) else None


def read_heads_file(path: str | Path) -> HeadsFile:
    hf = load_heads_file(path)
    model = hf.model.get("id")
    if not isinstance(model, str) or not model:
        raise VRHError(f"heads file {path}: field 'model.id' is missing")
    return HeadsFile(Path(path), shown_model(model), np.asarray(hf.scores, dtype=float), [str(h) for h in hf.ranking],
                     hf.sha256, _scoring(hf.scoring or {}), hf.geometry.total_heads)


def labels_for(files: list[HeadsFile]) -> list[str]:
    """Short model names; files of the same model are told apart by file name."""
    names = [short_model(f.model) for f in files]
    return [f"{n} ({f.path.stem})" if names.count(n) > 1 else n for n, f in zip(names, files, strict=True)]


def overlap_block(files: list[HeadsFile], ks: list[int]) -> dict | None:
    """Jaccard index of the top-k heads of every pair of files, for each k; None for fewer than two files (a matrix
    of one file against itself says nothing)."""
    if len(files) < 2:
        return None
    return {
        "labels": labels_for(files),
        "files": [shown_path(f.path) for f in files],
        "models": [f.model for f in files],
        "k": list(ks),
        "jaccard": {str(k): topk_jaccard_matrix([f.ranking for f in files], k).tolist() for k in ks},
    }


class ScoringLookup:
    """The scoring of the heads file a run used: a heads file given to the report with the same sha256, else the
    file at the run's recorded path if it still has that sha256. Unknown is None, never a guess."""

    def __init__(self, files: list[HeadsFile]):
        self._by_sha = {f.sha256: f.scoring for f in files if f.sha256}
        self._by_path: dict[str, HeadsFile | None] = {}

    def __call__(self, heads_file: dict | None) -> str | None:
        if not heads_file:
            return None
        sha, path = heads_file.get("sha256"), heads_file.get("path")
        if sha in self._by_sha:
            return self._by_sha[sha]
        if not isinstance(path, str) or not path:
            return None
        if path not in self._by_path:
            try:
                found = Path(path).expanduser()  # shown paths may start with ~
                self._by_path[path] = read_heads_file(found) if found.is_file() else None
            except (VRHError, OSError, ValueError):
                self._by_path[path] = None
        found = self._by_path[path]
        return found.scoring if found is not None and found.sha256 == sha else None


def heads_label(config: dict, scoring: str | None) -> str:
    """Neutral name of a configuration's head set: "top5 by out,sum,mean", "5 random heads (seed 2)"."""
    kind, k = config["kind"], config["k"]
    source = f" of {short_model(config['heads_source'])}" if config.get("heads_source") else ""
    if kind == "topk":
        if scoring:
            return f"top{k} by {scoring}{source}"
        path = (config.get("heads_file") or {}).get("path")
        return f"top{k} of {Path(path).name}{source}" if path else f"top{k}{source}"
    text = kinds.BY_NAME[kind].heads_text if kind in kinds.BY_NAME else None
    return text.format(**config) if text else config["label"]
