"""Candidate scores -> rank of the gold candidate, Recall@k and MRR, with cluster-aware intervals.

Rank of a query: 1 + the number of non-gold candidates scoring at least as high as the best gold candidate (ties go
against the ranker, so a head set that scores every candidate alike ranks nothing first). Recall@k is rank <= k (with
several gold pages, any gold page in the top k), reciprocal rank is 1 / rank. Queries that share a candidate set (the
synthetic groups, one MMDocIR document's pages) are one cluster: Recall@k gets `stats.accuracy`'s design-effect
adjusted Wilson interval (binary), MRR and seed-averaged shares its cluster-robust t interval (bounded).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.stats import accuracy

RECALL_KS = (1, 5)


def gold_rank(scores: Sequence[float] | np.ndarray, gold: Collection[int]) -> int:
    """1-based rank of the best gold candidate under the module's tie rule."""
    s = np.asarray(scores, dtype=float)
    g = sorted(set(int(i) for i in gold))
    if not g or g[0] < 0 or g[-1] >= s.size:
        raise VRHError(f"gold candidates {g} are not among the {s.size} candidates")
    if not np.all(np.isfinite(s)):
        raise VRHError("candidate scores must be finite")
    best = s[g].max()
    others = np.delete(s, g)
    return 1 + int(np.sum(others >= best))


def per_query(ranks: Sequence[int] | np.ndarray) -> dict[str, np.ndarray]:
    """{"recall@1", "recall@5", "rr"} -> per-query values of the given ranks."""
    r = np.asarray(ranks, dtype=float)
    out = {f"recall@{k}": (r <= k).astype(float) for k in RECALL_KS}
    out["rr"] = 1.0 / r
    return out


def summarise(values: dict[str, np.ndarray], clusters: Sequence[Any] | None, binary: bool) -> dict[str, Any]:
    """Mean and 95% interval of each metric over queries. `binary`: the recall values are 0/1 outcomes of one head
    set (Wilson); otherwise shares averaged over random draws (cluster-robust t)."""
    cl = None if clusters is None else np.asarray([str(c) for c in clusters])
    out: dict[str, Any] = {}
    for name, vals in values.items():
        quantity = "binary" if binary and name.startswith("recall@") else "bounded"
        res = accuracy(vals, cl, quantity=quantity)
        out["mrr" if name == "rr" else name] = {"mean": res.mean, "ci_low": res.ci_low, "ci_high": res.ci_high,
                                                "method": res.method, "n": res.n, "n_clusters": res.n_clusters}
    return out
