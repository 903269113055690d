"""The one resolver of head-set specs, used by model_args and every CLI command: a spec string (`top5`, `random5`,
`like:top5@all`, `L12H3;L14H0`; the forms are in vrh_lmms.base.heads.kinds, the table of head-set kinds) becomes the
concrete heads of a `HeadSet`, drawn by its kind's draw and checked against the model's geometry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import kinds
from vrh_lmms.base.heads.draws import ControlUnavailable, random_heads  # noqa: F401 (imported from here)
from vrh_lmms.base.heads.geometry import Geometry, HeadRef
from vrh_lmms.base.heads.heads_file import HeadsFile
from vrh_lmms.base.heads.kinds import IMAGE_MATCH_TOLERANCE, check_pool  # noqa: F401 (imported from here)

CONTROL_POOLS = kinds.POOLS  # what control draws are drawn from (vrh_lmms.base.heads.kinds)


@dataclass(frozen=True)
class HeadSet:
    """A resolved head set and how it came about (recorded in every result)."""

    heads: tuple[HeadRef, ...]
    spec: str
    kind: str  # a kind of vrh_lmms.base.heads.kinds with a spec (not a variant such as random_all)
    k: int
    seed: int | None = None
    heads_file: dict[str, Any] | None = field(default=None, compare=False)
    pool: str | None = None  # controls: one of kinds.POOLS; None for other kinds
    dead: tuple[HeadRef, ...] = ()  # the set's heads that write nothing (o_proj columns all zero)

    @property
    def names(self) -> list[str]:
        return [str(h) for h in self.heads]

    def by_layer(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for h in self.heads:
            out.setdefault(h.layer, []).append(h.head)
        return out

    def record(self) -> dict[str, Any]:
        return {"spec": self.spec, "heads": self.names, "kind": self.kind, "k": self.k, "seed": self.seed,
                "heads_file": self.heads_file, "pool": self.pool, "dead_heads": [str(h) for h in self.dead]}


def check_heads_file_fits(heads_file: HeadsFile, geometry: Geometry, *, allow_cross_model: bool) -> None:
    """A heads file made on another geometry is refused unless cross-model use is forced."""
    if heads_file.geometry != geometry and not allow_cross_model:
        raise VRHError(
            f"heads file {heads_file.path or ''} was made on geometry {heads_file.geometry.to_dict()} but the model "
            f"has {geometry.to_dict()}; pass allow_cross_model=true (CLI: --allow-cross-model) to use it anyway"
        )


def needs_heads_file(spec: str | None) -> bool:
    """Whether a spec ranks heads (top<K>, like:top<K>, image_matched:top<K>), so it needs a heads file."""
    parsed = kinds.match_form(kinds.split_pool(spec or "")[0])
    return parsed is not None and parsed.kind.needs_file


def check_spec_form(spec: str | None) -> None:
    """The spec's form alone, before any model or geometry is known (a typo fails before the weights load);
    `resolve_spec` checks the heads against the model."""
    kinds.parse_spec(spec)


def check_explicit_heads(spec: str | None, geometry: Geometry) -> None:
    """Explicit heads (`L3H0;L7H1`) against a geometry known before the model loads (config.json): a head outside
    the model, or in a layer without heads (a hybrid decoder's linear-attention layers), refused in one line naming
    the layers that have heads. Other spec forms are drawn once the model is loaded."""
    parsed = kinds.parse_spec(spec)
    for head in parsed.options.get("heads", ()) if parsed.kind.name == "explicit" else ():
        geometry.check(head, where=f"heads={spec}: head")


def resolve_spec(spec: str | None, geometry: Geometry, *, heads_file: HeadsFile | None = None, seed: int = 0,
                 allow_cross_model: bool = False, cell: str | None = None, dead: tuple[HeadRef, ...] = (),
                 pool: str = kinds.DEFAULT_POOL) -> HeadSet:
    """Turn a spec string into concrete heads checked against the model's geometry. `dead`: the model's heads that
    write nothing; controls leave them out under the live pool (a spec's `@all` / `@live` suffix overrides)."""
    check_pool(pool)
    parsed = kinds.parse_spec(spec)
    pool = parsed.pool or pool
    dead_set = frozenset(dead)
    hf_desc = heads_file.describe() if heads_file is not None else None
    if heads_file is not None:
        check_heads_file_fits(heads_file, geometry, allow_cross_model=allow_cross_model)
    kind = parsed.kind
    heads = kind.draw(kinds.Draw(parsed.text, parsed.k, geometry, seed, dead_set if pool == kinds.LIVE else frozenset(),
                                 heads_file, cell, parsed.options))
    for h in heads:
        geometry.check(h, where=f"head spec {parsed.text!r}: head")
    silent = tuple(sorted(h for h in heads if h in dead_set))
    shown = kind.spec.write(parsed.k) if kind.spec.canonical else (spec.strip() if spec else parsed.text)
    return HeadSet(tuple(sorted(heads)), shown, kind.name, parsed.k, seed if kind.control else None, hf_desc,
                   pool if kind.control else None, silent)
