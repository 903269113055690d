"""Tiny checkpoint families: name -> module with `build(out_dir, seed, **overrides) -> Path`."""

from __future__ import annotations

import importlib
from pathlib import Path

from vrh_lmms.errors import VRHError

# family name -> module under vrh_lmms.tiny
FAMILIES: dict[str, str] = {
    "qwen2_5_vl": "qwen2_5_vl",
    "qwen3_vl": "qwen3_vl",
    "internvl": "internvl",
    "llava_next": "llava_next",
    "paligemma": "paligemma",
    "glm4v": "glm4v",
    "idefics3": "idefics3",
}


def build_tiny(family: str, out_dir: str | Path, seed: int = 0, force: bool = False, **overrides) -> Path:
    """Write a tiny checkpoint; refuses to write into a non-empty folder unless `force` (nothing is overwritten)."""
    if family not in FAMILIES:
        raise VRHError(f"unknown tiny family {family!r}; known: {', '.join(sorted(FAMILIES))}")
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()) and not force:
        raise VRHError(f"{out} is not empty; pass --force to overwrite it")
    module = importlib.import_module(f"vrh_lmms.tiny.{FAMILIES[family]}")
    return module.build(out, seed=seed, **overrides)
