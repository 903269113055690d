"""Attention-head coordinates in a language decoder, and the decoder's shape."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass

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


@dataclass(frozen=True)
class Geometry:
    """Shape of a language decoder's attention: what a head set or heads file must fit."""

    layers: int
    heads: int
    kv_heads: int
    head_dim: int

    @property
    def total_heads(self) -> int:
        return self.layers * self.heads

    def all_heads(self) -> list[HeadRef]:
        return [HeadRef(layer, head) for layer in range(self.layers) for head in range(self.heads)]

    def check(self, head: HeadRef, where: str = "head") -> None:
        if not (0 <= head.layer < self.layers and 0 <= head.head < self.heads):
            raise VRHError(
                f"{where} {head} is outside the model: it has layers L0-L{self.layers - 1} and heads "
                f"H0-H{self.heads - 1} per layer"
            )

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, where: str = "geometry") -> Geometry:
        missing = [k for k in ("layers", "heads", "kv_heads", "head_dim") if k not in data]
        if missing:
            raise VRHError(f"{where} lacks field(s) {', '.join(missing)}")
        try:
            return cls(**{k: int(data[k]) for k in ("layers", "heads", "kv_heads", "head_dim")})
        except (TypeError, ValueError) as exc:
            raise VRHError(f"{where} has a non-integer field: {exc}") from None


def parse_head(token: str) -> HeadRef:
    """`L12H3` -> HeadRef(12, 3); anything else is refused with the token named."""
    m = _HEAD_RE.match(token.strip())
    if not m:
        raise VRHError(f"bad head {token.strip()!r}: expected the form L<layer>H<head>, e.g. L12H3")
    return HeadRef(int(m.group(1)), int(m.group(2)))


def format_heads(heads: Iterable[HeadRef]) -> str:
    return ";".join(str(h) for h in heads)
