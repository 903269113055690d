"""Per-query attention mass -> ranks and metrics of each head set: top-k of the heads file, all live heads, and
random-k draws (one per seed) from the live heads (vrh_lmms.base.heads.spec; dead heads write nothing, so their
attention cannot be what the model reads).

Per head set and scoring ("calibrated": query minus null-query mass; "raw": the query mass alone): Recall@1,
Recall@5 and MRR (vrh_lmms.runs.rank.metrics). A random-k row is the mean over draws of each query's outcome (a share,
cluster-robust t interval) with each draw's own Recall@1 beside it. Paired differences (top-k minus all, top-k minus
random-k) of per-query Recall@1 get the cluster-robust t interval of their mean (stats.accuracy, unbounded).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vrh_lmms.base.heads.geometry import Geometry, HeadRef
from vrh_lmms.base.heads.spec import resolve_spec
from vrh_lmms.base.stats import accuracy
from vrh_lmms.runs.rank.data import RankQuery
from vrh_lmms.runs.rank.metrics import gold_rank, per_query, summarise
from vrh_lmms.runs.rank.scoring import calibrated, candidate_scores

SCORINGS = ("calibrated", "raw")


@dataclass(frozen=True)
class RankSet:
    id: str
    kind: str  # "topk", "all", "random"
    k: int
    seed: int | None
    heads: tuple[HeadRef, ...]


def rank_sets(heads_file, geometry: Geometry, ks: Sequence[int], seeds: int, dead: Sequence[HeadRef]) -> list[RankSet]:
    """top-k and `seeds` random-k draws per k, then all live heads."""
    out = []
    for k in ks:
        top = resolve_spec(f"top{k}", geometry, heads_file=heads_file, dead=tuple(dead))
        out.append(RankSet(f"top{k}", "topk", k, None, top.heads))
        for seed in range(seeds):
            hs = resolve_spec(f"random{k}", geometry, heads_file=heads_file, seed=seed, dead=tuple(dead))
            out.append(RankSet(f"random{k}_s{seed}", "random", k, seed, hs.heads))
    dead_set = set(dead)
    live = tuple(h for h in geometry.all_heads() if h not in dead_set)
    out.append(RankSet("all", "all", len(live), None, live))
    return out


def query_ranks(queries: Sequence[RankQuery], query_mass: dict[str, np.ndarray], null_mass: dict[str, np.ndarray],
                sets: Sequence[RankSet]) -> dict[str, dict[str, np.ndarray]]:
    """scoring -> set id -> (n_queries,) gold ranks."""
    out: dict[str, dict[str, np.ndarray]] = {s: {} for s in SCORINGS}
    for scoring in SCORINGS:
        mass = [calibrated(query_mass[q.query_id], null_mass[q.set_id] if scoring == "calibrated" else None)
                for q in queries]
        for s in sets:
            out[scoring][s.id] = np.array([gold_rank(candidate_scores(m, s.heads), q.gold)
                                           for m, q in zip(mass, queries)])
    return out


def _diff(a: np.ndarray, b: np.ndarray, clusters: np.ndarray) -> dict[str, float]:
    res = accuracy(a - b, clusters, quantity="unbounded")
    return {"diff": res.mean, "ci_low": res.ci_low, "ci_high": res.ci_high}


def evaluate(queries: Sequence[RankQuery], ranks: dict[str, dict[str, np.ndarray]], sets: Sequence[RankSet],
             ks: Sequence[int]) -> dict[str, Any]:
    """Per scoring: the all-heads row and, per k, the top-k and random-k rows with paired Recall@1 differences."""
    clusters = np.asarray([q.set_id for q in queries])
    out: dict[str, Any] = {}
    for scoring, by_set in ranks.items():
        all_vals = per_query(by_set["all"])
        rows = []
        for k in ks:
            top_vals = per_query(by_set[f"top{k}"])
            draws = [s for s in sets if s.kind == "random" and s.k == k]
            row: dict[str, Any] = {"k": k, "topk": summarise(top_vals, clusters, binary=True),
                                   "topk_minus_all": {"recall@1": _diff(top_vals["recall@1"], all_vals["recall@1"],
                                                                        clusters)}}
            if draws:
                per_draw = [per_query(by_set[s.id]) for s in draws]
                mean_vals = {m: np.mean([d[m] for d in per_draw], axis=0) for m in top_vals}
                row["random"] = {**summarise(mean_vals, clusters, binary=False), "draws": len(draws),
                                 "per_seed_recall@1": [float(d["recall@1"].mean()) for d in per_draw]}
                row["topk_minus_random"] = {"recall@1": _diff(top_vals["recall@1"], mean_vals["recall@1"], clusters)}
            rows.append(row)
        n_all = len(next(s for s in sets if s.kind == "all").heads)
        out[scoring] = {"all": summarise(all_vals, clusters, binary=True), "n_all": n_all, "rows": rows}
    return out
