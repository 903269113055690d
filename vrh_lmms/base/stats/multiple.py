"""Multiplicity corrections across every comparison in a report (statsmodels `multipletests`).

Holm controls the family-wise error rate; Benjamini-Hochberg the false discovery rate. Missing p-values (NaN/None)
are left out of the family and stay missing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from statsmodels.stats.multitest import multipletests

_METHODS = {"holm": "holm", "bh": "fdr_bh"}


def adjust_pvalues(pvalues: Sequence[float | None], method: str) -> list[float | None]:
    """Adjusted p-values in input order; `method` is "holm" or "bh"."""
    if method not in _METHODS:
        raise ValueError(f"unknown correction {method!r}; use one of {sorted(_METHODS)}")
    raw = np.array([np.nan if p is None else float(p) for p in pvalues], dtype=float)
    finite = np.isfinite(raw)
    if np.any((raw[finite] < 0) | (raw[finite] > 1)):
        raise ValueError("p-values must lie in [0, 1]")
    out: list[float | None] = [None] * raw.size
    if finite.any():
        _, adjusted, _, _ = multipletests(raw[finite], method=_METHODS[method])
        for i, value in zip(np.flatnonzero(finite), adjusted, strict=True):
            out[int(i)] = float(value)
    return out


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    return adjust_pvalues(pvalues, "holm")


def benjamini_hochberg(pvalues: Sequence[float | None]) -> list[float | None]:
    return adjust_pvalues(pvalues, "bh")
