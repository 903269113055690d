"""Number formats shared by report.md and the claim sentences: fractions as percentage points (x100, one decimal),
p-values with three significant digits, models by their last path component."""

from __future__ import annotations


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100.0 * x:.1f}"


def pct_ci(x: float | None, low: float | None, high: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{pct(x)} [{pct(low)}, {pct(high)}]"


def pval(p: float | None) -> str:
    return "n/a" if p is None else f"{p:.3g}"


def short(model: str) -> str:
    return model.rstrip("/").split("/")[-1]


def pct_opt_ci(x: float | None, ci) -> str:
    """`pct_ci` where an interval was computed, the value alone where it was not (`ci` None or [None, None])."""
    return pct(x) if x is None or not ci or ci[0] is None else pct_ci(x, *ci)
