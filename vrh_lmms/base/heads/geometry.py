"""Attention-head coordinates in a language decoder, and the decoder's shape."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from vrh_lmms.base.errors import VRHError

_HEAD_RE = re.compile(r"^L(\d+)H(\d+)$", re.IGNORECASE)


@dataclass(frozen=True, order=True)
class HeadRef:
    """One attention head: 0-based layer and head index in the language decoder."""

    layer: int
    head: int

    def __str__(self) -> str:
        return f"L{self.layer}H{self.head}"


def head_name(layer: int, head: int) -> str:
    """"L4H12": the one spelling of a head, which parse_head reads back."""
    return str(HeadRef(int(layer), int(head)))


_BASE_FIELDS = ("layers", "heads", "kv_heads", "head_dim")


def layer_ranges(layers: Iterable[int]) -> str:
    """"L0-L2, L5, L7-L9": a set of decoder layers, short enough for one line."""
    out: list[str] = []
    run: list[int] = []
    for layer in sorted(set(int(x) for x in layers)):
        if run and layer != run[-1] + 1:
            out.append(f"L{run[0]}" if len(run) == 1 else f"L{run[0]}-L{run[-1]}")
            run = []
        run.append(layer)
    if run:
        out.append(f"L{run[0]}" if len(run) == 1 else f"L{run[0]}-L{run[-1]}")
    return ", ".join(out) if out else "none"


@dataclass(frozen=True)
class Geometry:
    """Shape of a language decoder's attention: what a head set or heads file must fit.

    `heads` is the number of query heads in every layer that has heads. Two optional fields describe decoders whose
    layers differ, and stay None (and out of `to_dict`) for a uniform decoder, so files written before them read the
    same: `head_layers`, the layers with softmax-attention heads (a hybrid decoder's linear-attention layers have
    none; a head keeps the index of its layer in the model, so `L3H0` is head 0 of decoder layer 3 whatever the
    layers before it are), and `layer_head_dims` / `layer_kv_heads`, one value per layer where the head width or the
    KV-head count varies (Gemma 4's global layers). `head_dim` and `kv_heads` are then those of the first layer
    with heads; ask `dim(layer)` and `kv(layer)` for a given layer."""

    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    head_layers: tuple[int, ...] | None = None
    layer_head_dims: tuple[int, ...] | None = None
    layer_kv_heads: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("head_layers", "layer_head_dims", "layer_kv_heads"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(int(v) for v in value))
        if self.head_layers is not None:
            if list(self.head_layers) != sorted(set(self.head_layers)) or any(
                    not 0 <= x < self.layers for x in self.head_layers):
                raise VRHError(f"head_layers must be increasing layer indices in 0-{self.layers - 1}, "
                               f"got {list(self.head_layers)}")
            if len(self.head_layers) == self.layers:
                object.__setattr__(self, "head_layers", None)  # every layer: the uniform spelling
        for name in ("layer_head_dims", "layer_kv_heads"):
            value = getattr(self, name)
            if value is not None:
                if len(value) != self.layers:
                    raise VRHError(f"{name} needs one value per layer ({self.layers}), got {len(value)}")
                used = {value[x] for x in self.attention_layers}
                if len(used) <= 1:
                    object.__setattr__(self, name, None)  # the same in every layer with heads: uniform

    @property
    def attention_layers(self) -> tuple[int, ...]:
        """The layers that have heads (all of them unless the decoder is hybrid)."""
        return tuple(range(self.layers)) if self.head_layers is None else self.head_layers

    @property
    def uniform(self) -> bool:
        """Every layer has heads of one width and one KV-head count (the shape of every decoder before hybrids)."""
        return self.head_layers is None and self.layer_head_dims is None and self.layer_kv_heads is None

    def has_heads(self, layer: int) -> bool:
        return 0 <= layer < self.layers and (self.head_layers is None or layer in self.head_layers)

    def dim(self, layer: int) -> int:
        """Head width of one layer."""
        return self.head_dim if self.layer_head_dims is None else self.layer_head_dims[layer]

    def kv(self, layer: int) -> int:
        """KV heads of one layer."""
        return self.kv_heads if self.layer_kv_heads is None else self.layer_kv_heads[layer]

    @property
    def max_head_dim(self) -> int:
        return max(self.dim(layer) for layer in self.attention_layers) if self.attention_layers else self.head_dim

    @property
    def total_heads(self) -> int:
        return len(self.attention_layers) * self.heads

    def all_heads(self) -> list[HeadRef]:
        return [HeadRef(layer, head) for layer in self.attention_layers for head in range(self.heads)]

    def check(self, head: HeadRef, where: str = "head") -> None:
        if not (0 <= head.layer < self.layers and 0 <= head.head < self.heads):
            raise VRHError(
                f"{where} {head} is outside the model: it has layers L0-L{self.layers - 1} and heads "
                f"H0-H{self.heads - 1} per layer"
            )
        if not self.has_heads(head.layer):
            raise VRHError(
                f"{where} {head} is in a layer without attention heads (a linear-attention layer of this hybrid "
                f"decoder); heads exist in {layer_ranges(self.attention_layers)}"
            )

    def describe(self) -> str:
        """"28 layers x 16 heads (kv 4, head_dim 128)", with the layers that have heads of a hybrid decoder and the
        layers whose KV heads or head width differ from the first's: one line for a console or a table."""
        where = "" if self.head_layers is None else \
            f" (heads in {len(self.attention_layers)}: {layer_ranges(self.attention_layers)})"
        varies = self._per_layer(self.dim, self.head_dim, "head_dim") + self._per_layer(self.kv, self.kv_heads, "kv")
        shape = f"kv {self.kv_heads}, head_dim {self.head_dim}{varies}"
        return f"{self.layers} layers{where} x {self.heads} heads ({shape})"

    def _per_layer(self, value, first: int, name: str) -> str:
        others: dict[int, list[int]] = {}
        for layer in self.attention_layers:
            if value(layer) != first:
                others.setdefault(value(layer), []).append(layer)
        return "".join(f"; {name} {v} in {layer_ranges(ls)}" for v, ls in sorted(others.items()))

    def to_dict(self) -> dict:
        out: dict = {k: getattr(self, k) for k in _BASE_FIELDS}
        for name in ("head_layers", "layer_head_dims", "layer_kv_heads"):
            if getattr(self, name) is not None:
                out[name] = list(getattr(self, name))
        return out

    @classmethod
    def from_dict(cls, data: dict, where: str = "geometry") -> Geometry:
        missing = [k for k in _BASE_FIELDS if k not in data]
        if missing:
            raise VRHError(f"{where} lacks field(s) {', '.join(missing)}")
        try:
            base = {k: int(data[k]) for k in _BASE_FIELDS}
            extra = {k: tuple(int(v) for v in data[k]) for k in ("head_layers", "layer_head_dims", "layer_kv_heads")
                     if data.get(k) is not None}
        except (TypeError, ValueError) as exc:
            raise VRHError(f"{where} has a non-integer field: {exc}") from None
        return cls(**base, **extra)


def parse_head(token: str) -> HeadRef:
    """`L12H3` -> HeadRef(12, 3); anything else is refused with the token named."""
    m = _HEAD_RE.match(token.strip())
    if not m:
        raise VRHError(f"bad head {token.strip()!r}: expected the form L<layer>H<head>, e.g. L12H3")
    return HeadRef(int(m.group(1)), int(m.group(2)))


def format_heads(heads: Iterable[HeadRef]) -> str:
    return ";".join(str(h) for h in heads)
