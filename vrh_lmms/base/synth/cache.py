"""Deterministic synthetic grounding data, generated once into a cache folder and reused.

A ``SynthSpec`` (scene count, seed, first scene id, SceneConfig overrides) names its folder by a hash of its
content, so a changed config never reuses stale files. Writes are atomic (temp folder + rename): two processes
generating the same spec at once both end up reading one complete copy.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from vrh_lmms.base import atomic
from vrh_lmms.base.synth.layouts import write_hub_layout, write_refer_layout
from vrh_lmms.base.synth.scenes import SceneConfig

CACHE_ENV = "VRH_CACHE_DIR"
SPLIT = "test"


def cache_root() -> Path:
    """``$VRH_CACHE_DIR``, else ``$XDG_CACHE_HOME/vrh_lmms``, else ``~/.cache/vrh_lmms``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "vrh_lmms"


@dataclass(frozen=True)
class SynthSpec:
    """Which synthetic scenes a task evaluates on. ``scene`` holds SceneConfig keyword overrides."""

    n: int = 100
    seed: int = 0
    start: int = 0
    scene: dict[str, Any] = field(default_factory=dict)
    # "target": one referring expression per scene; "all": one per uniquely nameable object (several per image,
    # as in RefCOCO), which steering and activation patching need (hub layout only)
    objects: str = "target"

    def __post_init__(self) -> None:
        if self.n <= 0:
            raise ValueError(f"synthetic spec: n must be positive, got {self.n}")
        if self.objects not in ("target", "all"):
            raise ValueError(f"synthetic spec: objects must be 'target' or 'all', got {self.objects!r}")
        known = {f.name for f in fields(SceneConfig)}
        unknown = sorted(set(self.scene) - known)
        if unknown:
            raise ValueError(f"synthetic spec: unknown scene setting(s) {', '.join(unknown)}; "
                             f"known: {', '.join(sorted(known))}")

    def scene_config(self) -> SceneConfig:
        kw = dict(self.scene)
        for key in ("colours", "shapes", "background"):
            if key in kw:
                kw[key] = tuple(kw[key])
        return SceneConfig(**kw)

    def digest(self) -> str:
        data = asdict(self)
        if data["objects"] == "target":  # the default leaves the folder names of earlier versions unchanged
            del data["objects"]
        blob = json.dumps(data, sort_keys=True, default=list).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    @classmethod
    def from_dict(cls, data: dict[str, Any], origin: str = "synthetic spec") -> SynthSpec:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{origin}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**data)


def _build_once(target: Path, write) -> Path:
    """Run ``write(tmp_dir)`` into a temp sibling and rename it to ``target`` unless another writer won."""
    if target.exists():
        return target
    tmp = atomic.staging_dir(target)
    try:
        write(tmp)
        atomic.follow_umask_tree(tmp)
        try:
            os.rename(tmp, target)
        except OSError:  # another process finished first
            if not target.exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def ensure_hub_data(spec: SynthSpec, root: Path | None = None) -> Path:
    """Folder holding ``test.parquet`` (lmms-lab RefCOCO layout) for ``spec``; generated on first use."""
    target = (root or cache_root() / "synth") / f"hub-{spec.digest()}"
    return _build_once(target, lambda d: write_hub_layout(d, {SPLIT: (spec.start, spec.n)}, spec.seed,
                                                          spec.scene_config(), spec.objects == "all"))


def ensure_refer_data(spec: SynthSpec, root: Path | None = None) -> Path:
    """Refer-layout root (``refcoco/refs(unc).p``, ``refcoco/instances.json``, ``images/``) for ``spec``."""
    if spec.objects != "target":
        raise ValueError("synthetic spec: objects='all' is available in the hub layout only (vrh_synth_grounding)")
    target = (root or cache_root() / "synth") / f"refer-{spec.digest()}"
    return _build_once(target, lambda d: write_refer_layout(d, {SPLIT: (spec.start, spec.n)}, spec.seed,
                                                            spec.scene_config()))
