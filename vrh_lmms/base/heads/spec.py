"""The one parser for head-set specs, used by model_args and every CLI command.

Forms (lists use `;` because lmms-eval splits model_args on commas):
  none                   no head ablated
  top<K>                 the K best heads of a heads file
  random<K>              K heads drawn uniformly from all heads (seeded)
  random<K>:skip_layer0  K heads drawn uniformly from the heads outside layer 0 (the control of the paper's DPO
                         experiment, Appendix B: 20 random heads, none in layer 0)
  like:top<K>            layer-matched random: in each layer, as many heads as top<K> has there, drawn from that
                         layer's other heads (aliases: random_like:top<K>, layer_matched<K>)
  random_outside:top<K>  K heads drawn at random outside the top-K set (the paper's control for its extra models;
                         alias random_outside<K>)
  image_matched:top<K>   image-matched: per top head, a head outside the top 2K whose attention mass on all image
                         tokens (heads file `image_mass`) is within 0.05 of it; `~T` sets the tolerance
                         (image_matched:top<K>~0.02; alias image_matched<K>)
  L12H3;L14H0            explicit heads

Control pools. A head whose o_proj columns are all zero writes nothing (`vrh_lmms.model.backbone.dead_heads`); ablating
it costs nothing by construction, so a control draw holding it controls for nothing. Controls (random, layer-matched,
image-matched) draw from the live heads by default (`pool="live"`); `pool="all"` draws uniformly over all heads
(the paper's definition) and records how many drawn heads are dead. A `@all` or `@live` suffix on a control spec
(random5@all) sets its pool whatever the run's default. On a model without dead heads both pools give the same draws.
A layer-matched draw that a layer cannot fill from its pool raises `ControlUnavailable` (a VRHError) with the reason:
callers report the configuration as unavailable instead of padding it with dead heads.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import Geometry, HeadRef, parse_head
from vrh_lmms.base.heads.heads_file import HeadsFile

_TOP = re.compile(r"^top(\d+)$", re.IGNORECASE)
_RANDOM = re.compile(r"^random(\d+)(?P<skip0>:skip_layer0)?$", re.IGNORECASE)
_LIKE = re.compile(r"^(?:like|random_like|random-like)[:=]top(\d+)$|^layer_matched(\d+)$", re.IGNORECASE)
_OUTSIDE = re.compile(r"^random_outside[:=]top(\d+)$|^random_outside(\d+)$", re.IGNORECASE)
_POOL = re.compile(r"^(?P<spec>.+?)@(?P<pool>live|all)$", re.IGNORECASE)
_IMATCH = re.compile(r"^(?:image_matched[:=]top(\d+)|image_matched(\d+))(?:~(\d*\.?\d+))?$", re.IGNORECASE)
IMAGE_MATCH_TOLERANCE = 0.05
CONTROL_POOLS = ("live", "all")  # what control draws are drawn from (module docstring)


class ControlUnavailable(VRHError):
    """A control head set that cannot be drawn from its pool (e.g. a layer without enough live heads)."""


@dataclass(frozen=True)
class HeadSet:
    """A resolved head set and how it came about (recorded in every result)."""

    heads: tuple[HeadRef, ...]
    spec: str
    kind: str  # baseline | topk | random | layer_matched | image_matched | explicit
    k: int
    seed: int | None = None
    heads_file: dict[str, Any] | None = field(default=None, compare=False)
    pool: str | None = None  # controls: "live" or "all" (CONTROL_POOLS); None for other kinds
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


def _need_file(heads_file: HeadsFile | None, spec: str) -> HeadsFile:
    if heads_file is None:
        raise VRHError(f"head spec {spec!r} needs a heads file (heads_file=PATH)")
    return heads_file


def check_heads_file_fits(heads_file: HeadsFile, geometry: Geometry, *, allow_cross_model: bool) -> None:
    """A heads file made on another geometry is refused unless cross-model use is forced."""
    if heads_file.geometry != geometry and not allow_cross_model:
        raise VRHError(
            f"heads file {heads_file.path or ''} was made on geometry {heads_file.geometry.to_dict()} but the model "
            f"has {geometry.to_dict()}; pass allow_cross_model=true (CLI: --allow-cross-model) to use it anyway"
        )


def random_heads(geometry: Geometry, k: int, seed: int | np.random.Generator,
                 exclude: frozenset[HeadRef] = frozenset()) -> list[HeadRef]:
    """k heads drawn uniformly without replacement from the heads not in `exclude` (with nothing excluded, exactly
    the draw of `rng.choice(total_heads, k)`: the same seed gives the same heads as before pools existed). `seed`
    may be a generator whose state the draw advances (a series of draws from one stream)."""
    flat = np.array([i for i in range(geometry.total_heads)
                     if HeadRef(i // geometry.heads, i % geometry.heads) not in exclude])
    if k > flat.size:
        what = "live heads" if exclude else "heads"
        raise VRHError(f"random{k} asks for more heads than the model has {what} ({flat.size})")
    rng = np.random.default_rng(seed)
    idx = rng.choice(flat, size=k, replace=False)
    return sorted(HeadRef(int(i) // geometry.heads, int(i) % geometry.heads) for i in idx)


def layer_matched_heads(top: list[HeadRef], geometry: Geometry, seed: int | np.random.Generator,
                        exclude: frozenset[HeadRef] = frozenset()) -> list[HeadRef]:
    """Same count per layer as `top`, drawn from each layer's heads that are neither in `top` nor in `exclude`
    (`seed`: an int, or a generator whose state the draw advances)."""
    rng = np.random.default_rng(seed)
    chosen = set(top)
    out: list[HeadRef] = []
    for layer, count in sorted(Counter(h.layer for h in top).items()):
        pool = [h for h in range(geometry.heads) if HeadRef(layer, h) not in chosen | exclude]
        if count > len(pool):
            others = geometry.heads - sum(1 for h in range(geometry.heads) if HeadRef(layer, h) in chosen)
            dead = f" ({others - len(pool)} of its {others} others write nothing)" if exclude and others > len(pool) \
                else ""
            raise ControlUnavailable(
                f"layer-matched control impossible in layer {layer}: the top set holds {count} of its "
                f"{geometry.heads} heads, and only {len(pool)} other {'live ' if exclude else ''}"
                f"head{'' if len(pool) == 1 else 's'} {'is' if len(pool) == 1 else 'are'} left{dead}")
        out.extend(HeadRef(layer, int(h)) for h in rng.choice(pool, size=count, replace=False))
    return sorted(out)


def needs_heads_file(spec: str | None) -> bool:
    """Whether a spec ranks heads (top<K>, like:top<K>, image_matched:top<K>), so it needs a heads file."""
    text = (spec or "").strip()
    if m := _POOL.match(text):
        text = m.group("spec").strip()
    return bool(_TOP.match(text) or _LIKE.match(text) or _IMATCH.match(text) or _OUTSIDE.match(text))


def explicit_heads(text: str) -> list[HeadRef]:
    """`L12H3;L14H0` -> its heads, each bad token or repeated head named."""
    heads = []
    for tok in [t for t in re.split(r"[;\s]+", text) if t]:
        try:
            heads.append(parse_head(tok))
        except VRHError:
            raise VRHError(
                f"bad head spec token {tok!r} in {text!r}: use none, top<K>, random<K>, random<K>:skip_layer0, "
                f"like:top<K>, random_outside:top<K>, image_matched:top<K> or heads like L12H3;L14H0"
            ) from None
    if len(set(heads)) != len(heads):
        dup = [str(h) for h, c in Counter(heads).items() if c > 1]
        raise VRHError(f"head spec {text!r} names {', '.join(dup)} more than once")
    return heads


def check_spec_form(spec: str | None) -> None:
    """The spec's form alone, before any model or geometry is known (a typo fails before the weights load);
    `resolve_spec` checks the heads against the model."""
    text = (spec or "none").strip()
    if m := _POOL.match(text):
        text = m.group("spec").strip()
    if text.lower() in ("none", "") or any(r.match(text) for r in (_TOP, _RANDOM, _LIKE, _OUTSIDE, _IMATCH)):
        return
    explicit_heads(text)


def check_pool(pool: str, where: str = "control pool") -> str:
    if pool not in CONTROL_POOLS:
        raise VRHError(f"{where} {pool!r}: use one of {', '.join(CONTROL_POOLS)}")
    return pool


def resolve_spec(spec: str | None, geometry: Geometry, *, heads_file: HeadsFile | None = None, seed: int = 0,
                 allow_cross_model: bool = False, cell: str | None = None, dead: tuple[HeadRef, ...] = (),
                 pool: str = "live") -> HeadSet:
    """Turn a spec string into concrete heads checked against the model's geometry. `dead`: the model's heads that
    write nothing; controls leave them out under `pool="live"` (a spec's `@all` / `@live` suffix overrides)."""
    text = (spec or "none").strip()
    check_pool(pool)
    if m := _POOL.match(text):
        text, pool = m.group("spec").strip(), m.group("pool").lower()
    dead_set = frozenset(dead)
    exclude = dead_set if pool == "live" else frozenset()
    hf_desc = heads_file.describe() if heads_file is not None else None
    if heads_file is not None:
        check_heads_file_fits(heads_file, geometry, allow_cross_model=allow_cross_model)
    if text.lower() in ("none", ""):
        return HeadSet((), "none", "baseline", 0, None, hf_desc)

    def ranking() -> list[HeadRef]:
        hf = _need_file(heads_file, text)
        return hf.cell_ranking(cell) if cell else hf.ranking

    if m := _TOP.match(text):
        k = int(m.group(1))
        rank = ranking()
        if k > len(rank):
            raise VRHError(f"head spec {text!r} asks for more heads than the heads file ranks ({len(rank)})")
        heads = rank[:k]
        kind, used_seed = "topk", None
    elif m := _RANDOM.match(text):
        k = int(m.group(1))
        layer0 = frozenset(HeadRef(0, h) for h in range(geometry.heads)) if m.group("skip0") else frozenset()
        heads, kind, used_seed = random_heads(geometry, k, seed, exclude | layer0), "random", seed
    elif m := _LIKE.match(text):
        k = int(m.group(1) or m.group(2))
        rank = ranking()
        if k > len(rank):
            raise VRHError(f"head spec {text!r} asks for more heads than the heads file ranks ({len(rank)})")
        heads, kind, used_seed = layer_matched_heads(rank[:k], geometry, seed, exclude), "layer_matched", seed
    elif m := _OUTSIDE.match(text):
        k = int(m.group(1) or m.group(2))
        rank = ranking()
        if k > len(rank):
            raise VRHError(f"head spec {text!r} asks for more heads than the heads file ranks ({len(rank)})")
        heads = random_heads(geometry, k, seed, exclude | frozenset(rank[:k]))
        kind, used_seed = "random_outside", seed
    elif m := _IMATCH.match(text):
        from vrh_lmms.base.heads.controls import image_matched_heads

        k = int(m.group(1) or m.group(2))
        tol = float(m.group(3)) if m.group(3) else IMAGE_MATCH_TOLERANCE
        rank = ranking()
        if k > len(rank):
            raise VRHError(f"head spec {text!r} asks for more heads than the heads file ranks ({len(rank)})")
        hf = _need_file(heads_file, text)
        heads = image_matched_heads(rank, hf.image_mass(), geometry, k, seed, tol, exclude)
        kind, used_seed = "image_matched", seed
    else:
        heads = explicit_heads(text)
        k, kind, used_seed = len(heads), "explicit", None
    for h in heads:
        geometry.check(h, where=f"head spec {text!r}: head")
    is_control = kind in ("random", "layer_matched", "image_matched", "random_outside")
    silent = tuple(sorted(h for h in heads if h in dead_set))
    return HeadSet(tuple(sorted(heads)), spec.strip() if spec else text, kind, k, used_seed, hf_desc,
                   pool if is_control else None, silent)
