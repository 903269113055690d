"""Tiny checkpoint factories, derived from the family registry: each `Family.tiny` names a module with
`build(out_dir, seed, **overrides) -> Path` (or that function)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.families import FAMILIES
from vrh_lmms.base.tables import DerivedTable, unknown_name


def _factories() -> dict[str, str | Callable]:
    return {f.name: f.tiny for f in FAMILIES.values() if f.tiny is not None}


# family name -> its tiny factory (a module path or a callable), derived from vrh_lmms.base.families
TINY_FACTORIES = DerivedTable(_factories, "tiny family")


def build_tiny(family: str, out_dir: str | Path, seed: int = 0, force: bool = False, **overrides) -> Path:
    """Write a tiny checkpoint. A non-empty folder is refused unless it holds a tiny checkpoint written here
    (its file listing says so) and `force` is given; then exactly those files are replaced."""
    # deferred: keeps `vrh-lmms make-tiny --help` free of filelock
    from vrh_lmms.base import atomic, owned

    if family not in TINY_FACTORIES:
        raise VRHError(unknown_name("tiny family", family, TINY_FACTORIES))
    factory = FAMILIES[family].tiny_factory()  # before the folder: a factory this transformers lacks is refused first
    out = Path(out_dir)
    owned.prepare_output(out, owned.listing_layout(out), force=force, what="a tiny checkpoint", option="OUT_DIR")
    path = factory(out, seed=seed, **overrides)
    atomic.follow_umask_tree(out)  # save_pretrained writes its safetensors 0600
    owned.write_listing(out)
    return path
