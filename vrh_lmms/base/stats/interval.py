"""One confidence-interval type for every result of `vrh_lmms.base.stats`, as scipy.stats gives one: a
`ConfidenceInterval(low, high)` named tuple (the fields of scipy's own, e.g. `scipy.stats.bootstrap(...)
.confidence_interval`), reached as `result.confidence_interval` on accuracy, drop and bootstrap results alike. The flat
`ci_low` / `ci_high` fields stay for the JSON files."""

from __future__ import annotations

from typing import NamedTuple

ALTERNATIVES = ("two-sided", "greater", "less")  # scipy.stats' `alternative=` values


class ConfidenceInterval(NamedTuple):
    low: float
    high: float


class HasInterval:
    """For result dataclasses with `ci_low` / `ci_high` fields."""

    ci_low: float
    ci_high: float

    @property
    def confidence_interval(self) -> ConfidenceInterval:
        return ConfidenceInterval(self.ci_low, self.ci_high)


def check_alternative(alternative: str) -> str:
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative {alternative!r}: use one of {', '.join(ALTERNATIVES)}")
    return alternative
