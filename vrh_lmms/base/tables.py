"""Read-only tables derived from the family registry, and the one-line error for an unknown name.

A `DerivedTable` recomputes its rows from the registry on every read, so a family registered later (a test, a
user's plugin) shows up in every derived table at once, and no table can drift from the registry."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

V = TypeVar("V")


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """" (did you mean 'a' or 'b'?)" for the known names close to `name` (difflib), else ""."""
    close = difflib.get_close_matches(str(name), [str(k) for k in known], n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


def unknown_name(what: str, name: Any, known: Iterable[str]) -> str:
    """One-line message for an unknown name: the close ones first, then every known one."""
    known = sorted(known)
    return f"unknown {what} {name!r}{did_you_mean(str(name), known)}; known: {', '.join(known)}"


class DerivedTable(Mapping[str, V], Generic[V]):
    """A mapping computed by `rows()` on each access (the registry is small; reads are rare)."""

    def __init__(self, rows: Callable[[], dict[str, V]], what: str) -> None:
        self._rows = rows
        self.what = what

    def __getitem__(self, key: str) -> V:
        rows = self._rows()
        if key not in rows:
            raise KeyError(unknown_name(self.what, key, rows))
        return rows[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows())

    def __len__(self) -> int:
        return len(self._rows())

    def __repr__(self) -> str:
        return f"<{self.what} table derived from vrh_lmms.base.families: {', '.join(self._rows())}>"
