"""The statistics layer agrees with scipy/statsmodels on fixed inputs and behaves at the edges."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest
from scipy.stats import t as student_t
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

from vrh_lmms.stats import (
    accuracy,
    adjust_pvalues,
    benjamini_hochberg,
    bootstrap_mean_diffs,
    exact_mcnemar,
    holm,
    jaccard,
    paired_bootstrap_drop,
    topk_jaccard_matrix,
    topk_vs_random,
)

BASE = np.array([1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1, 0, 1])
ABL = np.array([0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0])


def test_wilson_matches_statsmodels_and_se_is_binomial():
    res = accuracy(BASE)
    low, high = proportion_confint(BASE.sum(), BASE.size, alpha=0.05, method="wilson")
    assert (res.ci_low, res.ci_high) == pytest.approx((low, high))
    assert res.mean == pytest.approx(BASE.mean())
    assert res.se == pytest.approx(math.sqrt(BASE.mean() * (1 - BASE.mean()) / BASE.size))
    assert res.method == "wilson" and res.n_correct == BASE.sum()
    res90 = accuracy(BASE, alpha=0.1)
    assert (res90.ci_low, res90.ci_high) == pytest.approx(proportion_confint(BASE.sum(), BASE.size, 0.1, "wilson"))


def test_wilson_stays_inside_unit_interval_at_zero_accuracy():
    res = accuracy(np.zeros(30))
    assert res.ci_low == pytest.approx(0.0, abs=1e-12) and 0 < res.ci_high < 0.15


def test_numeric_scores_get_a_t_interval():
    values = np.array([0.1, 0.5, 0.9, 0.7, 0.3])
    res = accuracy(values)
    se = values.std(ddof=1) / math.sqrt(values.size)
    assert res.method == "t" and res.se == pytest.approx(se)
    assert (res.ci_low, res.ci_high) == pytest.approx(student_t.interval(0.95, 4, loc=values.mean(), scale=se))


def test_exact_mcnemar_matches_statsmodels_and_binomtest():
    res = exact_mcnemar(BASE, ABL)
    table = [[np.sum((BASE == 1) & (ABL == 1)), np.sum((BASE == 1) & (ABL == 0))],
             [np.sum((BASE == 0) & (ABL == 1)), np.sum((BASE == 0) & (ABL == 0))]]
    assert (res.lost, res.gained) == (table[0][1], table[1][0]) == (11, 1)
    assert res.pvalue == pytest.approx(mcnemar(table, exact=True).pvalue)
    assert res.pvalue == pytest.approx(binomtest(res.gained, res.lost + res.gained, 0.5).pvalue)
    assert exact_mcnemar(ABL, BASE).pvalue == pytest.approx(res.pvalue)  # two-sided: symmetric


def test_mcnemar_without_discordant_pairs_is_one_and_refuses_non_binary():
    assert exact_mcnemar(BASE, BASE).pvalue == 1.0
    with pytest.raises(ValueError, match="0/1"):
        exact_mcnemar([0.2, 1.0], [1.0, 0.0])


def test_holm_and_bh_match_statsmodels_and_keep_missing_values():
    p = [0.001, 0.04, 0.03, 0.2, 0.012, 0.5]
    assert holm(p) == pytest.approx(list(multipletests(p, method="holm")[1]))
    assert benjamini_hochberg(p) == pytest.approx(list(multipletests(p, method="fdr_bh")[1]))
    with_gap = adjust_pvalues([0.01, None, 0.04, float("nan")], "holm")
    assert with_gap[1] is None and with_gap[3] is None
    assert [with_gap[0], with_gap[2]] == pytest.approx(list(multipletests([0.01, 0.04], method="holm")[1]))
    with pytest.raises(ValueError):
        adjust_pvalues([0.1], "bonferroni-ish")


def test_topk_vs_random_empirical_p_convention():
    res = topk_vs_random(0.30, [0.01, 0.05, 0.31, -0.02])
    assert res.n_null_ge_observed == 1
    assert res.pvalue == pytest.approx((1 + 1) / (1 + 4))
    assert res.null_mean == pytest.approx(np.mean([0.01, 0.05, 0.31, -0.02]))
    assert res.null_sd == pytest.approx(np.std([0.01, 0.05, 0.31, -0.02], ddof=1))
    assert topk_vs_random(0.5, [0.0, 0.1, 0.2]).pvalue == pytest.approx(0.25)  # floor 1/(1+n)
    assert topk_vs_random(0.1, [0.1]).pvalue == pytest.approx(1.0)  # ties count against top-k
    with pytest.raises(ValueError, match="empty"):
        topk_vs_random(0.3, [])


def test_jaccard_overlap():
    assert jaccard(["L1H1", "L2H2"], ["L2H2", "L3H3"]) == pytest.approx(1 / 3)
    mat = topk_jaccard_matrix([["a", "b", "c"], ["b", "a", "d"], ["x", "y", "z"]], k=2)
    assert mat.tolist() == [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]


def test_bootstrap_point_estimate_seed_and_cluster_handling():
    rng = np.random.default_rng(1)
    clusters = np.repeat(np.arange(30), 4)
    b = rng.integers(0, 2, clusters.size)
    a = rng.integers(0, 2, clusters.size)
    res = paired_bootstrap_drop(b, a, clusters, n_resamples=500, seed=5)
    assert res.drop == pytest.approx(b.mean() - a.mean())
    assert res.n_clusters == 30 and res.n_pairs == 120 and res.clustered
    assert res == paired_bootstrap_drop(b, a, clusters, n_resamples=500, seed=5)
    assert res != paired_bootstrap_drop(b, a, clusters, n_resamples=500, seed=6)
    # One cluster holding all the samples: every resample is the same, so the CI collapses on the estimate.
    one = paired_bootstrap_drop(b, a, np.zeros(b.size), n_resamples=200)
    assert one.ci_low == pytest.approx(one.drop) and one.ci_high == pytest.approx(one.drop)
    with pytest.raises(ValueError, match="length"):
        paired_bootstrap_drop(b, a[:-1])


def test_bootstrap_matches_a_loop_implementation():
    """The vectorised resampler equals a plain loop drawing the same cluster indices."""
    rng = np.random.default_rng(2)
    clusters = rng.integers(0, 12, 60)
    d = rng.integers(-1, 2, 60).astype(float)
    got = bootstrap_mean_diffs(d, clusters, n_resamples=300, seed=9)
    labels = np.unique(clusters)
    draw = np.random.default_rng(9).integers(0, labels.size, size=(300, labels.size), dtype=np.int32)
    expected = [np.concatenate([d[clusters == labels[i]] for i in row]).mean() for row in draw]
    assert got == pytest.approx(expected)


def test_bootstrap_of_5000_pairs_is_fast():
    import time

    rng = np.random.default_rng(3)
    b, a = rng.integers(0, 2, 5000), rng.integers(0, 2, 5000)
    clusters = rng.integers(0, 5000, 5000)  # nearly one sample per image: the most clusters
    start = time.perf_counter()
    paired_bootstrap_drop(b, a, clusters, n_resamples=10_000)
    assert time.perf_counter() - start < 5.0  # ~0.6 s on one core; generous for shared CI machines
