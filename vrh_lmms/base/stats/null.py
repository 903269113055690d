"""Top-k vs random-k: is the drop from masking the top-k heads larger than from masking k random heads?

The null distribution is the set of drops from random (or layer-matched random) head sets of the same size, one per
seed. The empirical p uses the (1 + #{random >= observed}) / (1 + n) convention, so it is never 0 and its floor
1 / (1 + n) says how many seeds the claim rests on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy.stats import sem


@dataclass(frozen=True)
class NullComparison:
    observed: float
    n_null: int
    null_mean: float
    null_sd: float
    null_se: float  # the standard error of null_mean: the ± a report prints beside it
    null_min: float
    null_max: float
    n_null_ge_observed: int
    pvalue: float
    p_floor: float
    alternative: str = "greater"  # one-sided by construction: is the observed drop larger than the draws'?

    def to_dict(self) -> dict:
        return asdict(self)


def topk_vs_random(observed_drop: float, null_drops: Sequence[float]) -> NullComparison:
    """Compare one observed drop with drops of random head sets (one-sided: is the observed drop larger?)."""
    null = np.asarray(list(null_drops), dtype=float)
    if null.size == 0:
        raise ValueError("the null distribution is empty: no random configurations with this k")
    if not np.all(np.isfinite(null)) or not np.isfinite(observed_drop):
        raise ValueError("drops must be finite")
    n_ge = int(np.sum(null >= observed_drop))
    n = int(null.size)
    return NullComparison(
        observed=float(observed_drop),
        n_null=n,
        null_mean=float(null.mean()),
        null_sd=float(null.std(ddof=1)) if n > 1 else float("nan"),
        null_se=float(sem(null)) if n > 1 else float("nan"),
        null_min=float(null.min()),
        null_max=float(null.max()),
        n_null_ge_observed=n_ge,
        pvalue=(1.0 + n_ge) / (1.0 + n),
        p_floor=1.0 / (1.0 + n),
    )
