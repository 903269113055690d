"""The ranker's pure layers against direct numpy: head-set scores, calibration, gold ranks, Recall@k, MRR and
their clustered intervals."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import HeadRef
from vrh_lmms.runs.rank.metrics import gold_rank, per_query, summarise
from vrh_lmms.runs.rank.scoring import calibrated, candidate_scores


def test_scores_are_the_mean_of_the_chosen_heads_minus_the_null():
    rng = np.random.default_rng(0)
    q, null = rng.random((3, 4, 5)), rng.random((3, 4, 5))
    heads = [HeadRef(0, 1), HeadRef(2, 3)]
    got = candidate_scores(calibrated(q, null), heads)
    want = ((q[0, 1] - null[0, 1]) + (q[2, 3] - null[2, 3])) / 2
    np.testing.assert_allclose(got, want)
    np.testing.assert_allclose(candidate_scores(calibrated(q, None), heads), (q[0, 1] + q[2, 3]) / 2)
    with pytest.raises(VRHError, match="outside"):
        candidate_scores(q, [HeadRef(3, 0)])


def test_gold_rank_counts_ties_against_the_ranker():
    assert gold_rank([0.1, 0.5, 0.3], [1]) == 1
    assert gold_rank([0.1, 0.5, 0.3], [0]) == 3
    assert gold_rank([0.5, 0.5, 0.3], [0]) == 2  # a tie is not a win
    assert gold_rank([0.2, 0.2, 0.2, 0.2], [2]) == 4
    assert gold_rank([0.1, 0.4, 0.9, 0.3], [0, 3]) == 3  # best gold page counts
    with pytest.raises(VRHError, match="not among"):
        gold_rank([0.1, 0.2], [2])


def test_metrics_equal_a_direct_computation():
    rng = np.random.default_rng(1)
    n_q, n_c = 60, 8
    scores = rng.random((n_q, n_c))
    gold = rng.integers(0, n_c, n_q)
    clusters = np.repeat(np.arange(n_q // 3), 3)
    ranks = np.array([gold_rank(s, [g]) for s, g in zip(scores, gold)])
    direct = np.array([1 + np.sum(np.delete(s, g) >= s[g]) for s, g in zip(scores, gold)])  # argsort-free rank
    order_rank = np.array([int(np.where(np.argsort(-s, kind="stable") == g)[0][0]) + 1 for s, g in zip(scores, gold)])
    np.testing.assert_array_equal(ranks, direct)
    np.testing.assert_array_equal(ranks, order_rank)  # no ties in continuous scores
    out = summarise(per_query(ranks), clusters, binary=True)
    assert out["recall@1"]["mean"] == pytest.approx(np.mean(direct == 1))
    assert out["recall@5"]["mean"] == pytest.approx(np.mean(direct <= 5))
    assert out["mrr"]["mean"] == pytest.approx(np.mean(1 / direct))
    # MRR interval: cluster-robust t with G - 1 df, by hand
    rr = 1 / direct
    sums = np.bincount(clusters, weights=rr)
    counts = np.bincount(clusters).astype(float)
    g = sums.size
    se = np.sqrt(g / (g - 1) * np.sum((sums - rr.mean() * counts) ** 2) / rr.size**2)
    lo, hi = sps.t.interval(0.95, g - 1, loc=rr.mean(), scale=se)
    assert out["mrr"]["ci_low"] == pytest.approx(max(0.0, lo))
    assert out["mrr"]["ci_high"] == pytest.approx(min(1.0, hi))
    assert out["recall@1"]["method"] == "wilson" and out["recall@1"]["n_clusters"] == g
    assert out["recall@1"]["ci_low"] < out["recall@1"]["mean"] < out["recall@1"]["ci_high"]
