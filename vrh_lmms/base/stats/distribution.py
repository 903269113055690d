"""How head scores are distributed: the share of heads whose score exceeds each threshold (the paper's Fig 5 reads
the shares above 1e-3 and 5e-3: retrieval heads are few, and most heads score near zero)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def share_above(scores: np.ndarray, thresholds: Sequence[float]) -> dict[float, float]:
    """Threshold -> share of all heads with score strictly above it (NaN scores count as not above)."""
    flat = np.asarray(scores, dtype=float).ravel()
    if flat.size == 0:
        raise ValueError("no scores to summarise")
    return {float(t): float(np.count_nonzero(flat > t)) / flat.size for t in thresholds}
