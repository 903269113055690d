"""Per-head attention mass on each candidate -> candidate scores (pure numpy).

A head's mass on a candidate is the attention probability its query row puts on that candidate's image tokens
(summed over the tokens, so a candidate's share of the head's attention). A head set scores a candidate with the
mean of its heads' masses. Null-question calibration subtracts the same mass read with a content-free query ("N/A")
over the same candidates: what a head gives a candidate whatever is asked (position in the prompt, size, salience)
is not evidence that the candidate answers the query.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import HeadRef
from vrh_lmms.runs.maps.views import head_set_map

NULL_QUERY = "N/A"


def candidate_scores(mass: np.ndarray, heads: Sequence[HeadRef]) -> np.ndarray:
    """(n_candidates,) mean over `heads` of mass (layers, heads, n_candidates): the locator's head-set mean, with
    candidates in place of image tokens."""
    return head_set_map(np.asarray(mass, dtype=float), heads)


def calibrated(query_mass: np.ndarray, null_mass: np.ndarray | None) -> np.ndarray:
    """query minus null mass per head and candidate (None: no calibration, the query mass itself)."""
    if null_mass is None:
        return np.asarray(query_mass, dtype=float)
    if np.shape(query_mass) != np.shape(null_mass):
        raise VRHError(f"null-query mass {np.shape(null_mass)} does not match the query's {np.shape(query_mass)}")
    return np.asarray(query_mass, dtype=float) - np.asarray(null_mass, dtype=float)
