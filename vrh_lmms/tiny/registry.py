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
    """Write a tiny checkpoint. A non-empty folder is refused unless it holds a tiny checkpoint written here
    (its file listing says so) and `force` is given; then exactly those files are replaced."""
    from vrh_lmms import atomic, owned

    if family not in FAMILIES:
        raise VRHError(f"unknown tiny family {family!r}; known: {', '.join(sorted(FAMILIES))}")
    out = Path(out_dir)
    owned.prepare_output(out, owned.listing_layout(out), force=force, what="a tiny checkpoint", option="OUT_DIR")
    module = importlib.import_module(f"vrh_lmms.tiny.{FAMILIES[family]}")
    path = module.build(out, seed=seed, **overrides)
    atomic.follow_umask_tree(out)  # save_pretrained writes its safetensors 0600
    owned.write_listing(out)
    return path
