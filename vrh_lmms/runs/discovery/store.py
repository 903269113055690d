"""Resumable per-sample storage of discovery statistics: one small file per doc, written atomically.

A killed discovery loses at most the doc in flight; a rerun skips every doc with a part file (and replays its
stored answer, so evaluation results are identical). Nothing is overwritten: a part is written once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from vrh_lmms.base import atomic
from vrh_lmms.base.errors import VRHError


@dataclass
class SamplePart:
    key: str
    stats: dict[str, np.ndarray]  # quantity -> (layers, heads)
    answer_ids: np.ndarray  # generated continuation (as the backend received it)
    meta: dict
    head_sums: np.ndarray | None = None  # (layers, heads*head_dim) float32 sums of o_proj inputs, for means
    tokens: int = 0


class PartStore:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in key)
        return self.root / f"{safe}.npz"

    def has(self, key: str) -> bool:
        return self.path(key).is_file()

    def write(self, part: SamplePart) -> Path:
        path = self.path(part.key)
        if path.exists():
            raise VRHError(f"discovery part {path} exists already; refusing to overwrite it")
        arrays = {f"stat__{k}": v.astype(np.float32) for k, v in part.stats.items()}
        arrays["answer_ids"] = np.asarray(part.answer_ids, dtype=np.int64)
        arrays["meta"] = np.frombuffer(json.dumps({"key": part.key, "tokens": part.tokens, **part.meta}).encode(),
                                       dtype=np.uint8)
        if part.head_sums is not None:
            arrays["head_sums"] = part.head_sums.astype(np.float32)
        with atomic.atomic_file(path, suffix=".npz") as tmp:
            np.savez(tmp, **arrays)
        return path

    def read(self, key: str) -> SamplePart:
        with np.load(self.path(key)) as data:
            meta = json.loads(bytes(data["meta"]).decode())
            stats = {k[len("stat__"):]: data[k].astype(np.float64) for k in data.files if k.startswith("stat__")}
            return SamplePart(key=meta.pop("key"), stats=stats, answer_ids=data["answer_ids"],
                              meta=meta, head_sums=data["head_sums"] if "head_sums" in data.files else None,
                              tokens=int(meta.pop("tokens", 0)))

    def cached_answer(self, key: str) -> tuple[torch.Tensor, bool] | None:
        """The stored answer ids, and whether the backend's generate returned them after the prompt."""
        if not self.has(key):
            return None
        with np.load(self.path(key)) as data:
            meta = json.loads(bytes(data["meta"]).decode())
            return torch.from_numpy(data["answer_ids"].copy()), bool(meta.get("output_includes_prompt", True))

    def keys(self) -> list[str]:
        out = []
        for p in sorted(self.root.glob("[!.]*.npz")):  # not the temporary file of a part a killed rank was writing
            with np.load(p) as data:
                out.append(json.loads(bytes(data["meta"]).decode())["key"])
        return out
