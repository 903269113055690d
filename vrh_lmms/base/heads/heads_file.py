"""Heads files (`vrh-heads/1` JSON): per-head scores and a ranking, with how they were made.

See docs/contracts.md. Readers validate every field they use and name the bad one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vrh_lmms.base import atomic
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.checks import ranking_agrees, score_grid
from vrh_lmms.base.heads.geometry import Geometry, HeadRef, parse_head

SCHEMA = "vrh-heads/1"


@dataclass
class HeadsFile:
    model: dict[str, Any]
    geometry: Geometry
    scores: np.ndarray  # layers x heads
    ranking: list[HeadRef]
    scoring: dict[str, Any] = field(default_factory=dict)
    cells: dict[str, dict[str, Any]] = field(default_factory=dict)
    baseline: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    sha256: str | None = None
    source: str | None = None  # how a run found it: None (heads_file=), "registry" or "paper:<benchmark>"

    def top(self, k: int) -> list[HeadRef]:
        if k < 0:
            raise VRHError(f"top-k needs k >= 0, got {k}")
        if k > len(self.ranking):
            raise VRHError(f"top{k} asks for more heads than the heads file ranks ({len(self.ranking)})")
        return list(self.ranking[:k])

    def cell_name(self, cell: str) -> str:
        """The key in `cells` of a cell or of a preset named in the file's `presets` block (`qrhead` ->
        `in,sum,mean`), so a scorer's ranking is reachable by either name."""
        if cell in self.cells:
            return cell
        presets = self.extra.get("presets") or {}
        if cell in presets and presets[cell] in self.cells:
            return presets[cell]
        known = list(dict.fromkeys([*self.cells, *presets]))  # a preset may share its cell's name
        raise VRHError(f"heads file has no scoring cell or preset {cell!r}; it has: {', '.join(known) or 'none'}")

    def cell_ranking(self, cell: str) -> list[HeadRef]:
        return [parse_head(h) for h in self.cells[self.cell_name(cell)]["ranking"]]

    def to_json(self) -> dict[str, Any]:
        out = {
            "schema": SCHEMA,
            "model": self.model,
            "geometry": self.geometry.to_dict(),
            "scoring": self.scoring,
            "scores": np.asarray(self.scores, dtype=float).round(8).tolist(),
            "ranking": [str(h) for h in self.ranking],
        }
        if self.cells:
            out["cells"] = self.cells
        if self.baseline is not None:
            out["baseline"] = self.baseline
        out.update(self.extra)
        return out

    def image_mass(self) -> np.ndarray:
        """(layers, heads) mean attention of the answer rows on all image tokens (written by `discover`)."""
        block = self.extra.get("image_mass")
        if not isinstance(block, dict) or "scores" not in block:
            raise VRHError(f"heads file {self.path or ''} has no image_mass (written by `vrh-lmms discover` since "
                           "the image-matched control exists); rerun discovery")
        return score_grid(block["scores"], (self.geometry.layers, self.geometry.heads),
                          f"heads file {self.path or ''}: field 'image_mass.scores'")

    def describe(self) -> dict[str, Any]:
        """What a run records about the heads file it used."""
        out = {"path": str(self.path) if self.path else None, "sha256": self.sha256, "model": self.model.get("id")}
        # the discovery's task(s) and evidence kind: a report tells heads found on another task apart (cross-ablation)
        found = {key: self.scoring[key] for key in ("task", "evidence") if isinstance(self.scoring.get(key), str)}
        return out | ({"source": self.source} if self.source else {}) | found


def ranking_from_scores(scores: np.ndarray) -> list[HeadRef]:
    """All heads, best first; ties broken by layer then head so rankings are deterministic."""
    scores = np.asarray(scores, dtype=float)
    layers, heads = scores.shape
    flat = [(-scores[l, h], l, h) for l in range(layers) for h in range(heads)]
    flat.sort()
    return [HeadRef(l, h) for _, l, h in flat]


def save_heads_file(hf: HeadsFile, path: str | Path, *, force: bool = False) -> Path:
    """Write atomically; refuse to replace an existing file unless `force`."""
    path = Path(path)
    if path.exists() and not force:
        raise VRHError(f"{path} exists; pass --force to overwrite it")
    text = json.dumps(hf.to_json(), indent=1)
    atomic.write_text(path, text)
    hf.path, hf.sha256 = path, hashlib.sha256(text.encode()).hexdigest()
    return path


def load_heads_file(path: str | Path) -> HeadsFile:
    path = Path(path)
    if not path.is_file():
        raise VRHError(f"heads file {path} does not exist")
    raw = path.read_bytes()
    try:
        data = json.loads(raw)
    except UnicodeDecodeError:  # a binary file (json.loads reads bytes as UTF-8/16/32 text)
        raise VRHError(f"heads file {path} is not valid JSON: it is not UTF-8 text (a binary file?)") from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise VRHError(f"heads file {path} is not valid JSON: {str(exc)[:200]}") from None
    hf = parse_heads_json(data, where=f"heads file {path}")
    hf.path, hf.sha256 = path, hashlib.sha256(raw).hexdigest()
    return hf


def parse_heads_json(data: Any, where: str = "heads file") -> HeadsFile:
    if not isinstance(data, dict):
        raise VRHError(f"{where}: top level must be a JSON object")
    schema = data.get("schema")
    if not isinstance(schema, str) or not schema.startswith("vrh-heads/"):
        raise VRHError(f"{where}: field 'schema' must be '{SCHEMA}', got {schema!r}")
    if schema.split("/")[1].split(".")[0] != SCHEMA.split("/")[1]:
        raise VRHError(f"{where}: schema {schema!r} is not supported (this version reads {SCHEMA})")
    for key in ("model", "geometry", "scores", "ranking"):
        if key not in data:
            raise VRHError(f"{where}: missing field '{key}'")
    if not isinstance(data["model"], dict):
        raise VRHError(f"{where}: field 'model' must be an object with at least 'id'")
    if not isinstance(data["geometry"], dict):
        raise VRHError(f"{where}: field 'geometry' must be an object with layers, heads, kv_heads, head_dim")
    geometry = Geometry.from_dict(data["geometry"], where=f"{where}: field 'geometry'")
    shape = (geometry.layers, geometry.heads)
    scores = score_grid(data["scores"], shape, f"{where}: field 'scores'")
    ranking = _ranking(data["ranking"], geometry, f"{where}: field 'ranking'")
    ranking_agrees(scores, ranking, f"{where}: field 'ranking'")
    cells = data.get("cells", {})
    if not isinstance(cells, dict):
        raise VRHError(f"{where}: field 'cells' must be an object of cell name -> {{scores, ranking}}")
    for name, cell in cells.items():
        field_name = f"{where}: field 'cells.{name}"
        if not isinstance(cell, dict) or not {"scores", "ranking"} <= set(cell):
            raise VRHError(f"{field_name}' must be an object with 'scores' and 'ranking'")
        cell_scores = score_grid(cell["scores"], shape, f"{field_name}.scores'")
        ranking_agrees(cell_scores, _ranking(cell["ranking"], geometry, f"{field_name}.ranking'"),
                       f"{field_name}.ranking'")
    for key in ("scoring", "baseline"):
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise VRHError(f"{where}: field '{key}' must be an object, got {type(data[key]).__name__}")
    known = {"schema", "model", "geometry", "scores", "ranking", "scoring", "cells", "baseline"}
    return HeadsFile(
        model=data["model"], geometry=geometry, scores=scores, ranking=ranking,
        scoring=data.get("scoring") or {}, cells=cells, baseline=data.get("baseline"),
        extra={k: v for k, v in data.items() if k not in known},
    )


def _ranking(value: Any, geometry: Geometry, where: str) -> list[HeadRef]:
    """A list of distinct heads of the geometry, each item named when bad."""
    if not isinstance(value, list):
        raise VRHError(f"{where} must be a list of heads like 'L12H3'")
    ranking = []
    for i, tok in enumerate(value):
        if not isinstance(tok, str):
            raise VRHError(f"{where} item {i} is {tok!r}: expected a head like 'L12H3'")
        try:
            head = parse_head(tok)
        except VRHError as exc:
            raise VRHError(f"{where} item {i}: {exc}") from None
        geometry.check(head, where=f"{where} item {i}")
        ranking.append(head)
    if len(set(ranking)) != len(ranking):
        raise VRHError(f"{where} lists a head twice")
    return ranking
