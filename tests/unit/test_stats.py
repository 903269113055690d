"""The statistics layer agrees with scipy/statsmodels on fixed inputs and behaves at the edges."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest, bootstrap, chi2, norm, permutation_test
from scipy.stats import t as student_t
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

from vrh_lmms.base.stats import (
    accuracy,
    adjust_pvalues,
    benjamini_hochberg,
    exact_mcnemar,
    holm,
    jaccard,
    paired_bootstrap_drop,
    paired_drop,
    sign_flip_test,
    tango_interval,
    topk_jaccard_matrix,
    topk_vs_random,
)
from vrh_lmms.base.stats.tango import tango_statistic

BASE = np.array([1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1, 0, 1])
ABL = np.array([0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0])


def test_wilson_matches_statsmodels_and_se_is_binomial():
    res = accuracy(BASE, quantity="binary")
    low, high = proportion_confint(BASE.sum(), BASE.size, alpha=0.05, method="wilson")
    assert (res.ci_low, res.ci_high) == pytest.approx((low, high))
    assert res.mean == pytest.approx(BASE.mean())
    assert res.se == pytest.approx(math.sqrt(BASE.mean() * (1 - BASE.mean()) / BASE.size))
    assert res.method == "wilson" and res.n_correct == BASE.sum()
    res90 = accuracy(BASE, alpha=0.1, quantity="binary")
    assert (res90.ci_low, res90.ci_high) == pytest.approx(proportion_confint(BASE.sum(), BASE.size, 0.1, "wilson"))


def test_wilson_stays_inside_unit_interval_at_zero_accuracy():
    res = accuracy(np.zeros(30), quantity="binary")
    assert res.ci_low == pytest.approx(0.0, abs=1e-12) and 0 < res.ci_high < 0.15


def test_numeric_scores_get_a_t_interval():
    values = np.array([0.1, 0.5, 0.9, 0.7, 0.3])
    res = accuracy(values, quantity="unbounded")
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


def _clustered(seed: int, n_images: int = 40):
    """Images with 1-6 expressions whose outcomes share an image effect, and an ablation that hits whole images."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 7, n_images)
    clusters = np.repeat(np.arange(n_images), sizes)
    ease = rng.normal(size=n_images)[clusters]
    base = (rng.random(clusters.size) < 1 / (1 + np.exp(-(1.4 + 1.5 * ease)))).astype(float)
    hit = (rng.random(n_images) < 0.4)[clusters]
    abl = np.where(hit, (rng.random(clusters.size) < 0.3).astype(float), base)
    return base, abl, clusters


def _ratio_var(values, clusters):
    """Cluster-robust variance of a pooled mean, written out: G/(G-1) * sum_k (y_k - mean * m_k)^2 / n^2."""
    labels = np.unique(clusters)
    y = np.array([values[clusters == c].sum() for c in labels])
    m = np.array([np.sum(clusters == c) for c in labels], dtype=float)
    mean = y.sum() / m.sum()
    return labels.size / (labels.size - 1) * np.sum((y - mean * m) ** 2) / m.sum() ** 2


def test_clustered_accuracy_is_wilson_on_the_effective_sample_size():
    base, _, clusters = _clustered(1)
    res = accuracy(base, clusters, quantity="binary")
    p, n = base.mean(), base.size
    deff = max(1.0, _ratio_var(base, clusters) / (p * (1 - p) / n))
    assert res.deff == pytest.approx(deff) and res.deff > 1.2 and res.deff_method == "estimated"
    low, high = proportion_confint(p * n / deff, n / deff, method="wilson")
    assert (res.ci_low, res.ci_high) == pytest.approx((low, high))
    assert res.n_clusters == 40 and res.n_eff == pytest.approx(n / deff)
    # One sample per image: exactly the plain Wilson interval.
    alone = accuracy(base, np.arange(base.size), quantity="binary")
    assert (alone.ci_low, alone.ci_high) == pytest.approx(proportion_confint(base.sum(), n, method="wilson"))
    assert alone.deff == 1.0 and alone.deff_method == "none"


def test_accuracy_of_zero_uses_the_worst_case_design_effect():
    _, _, clusters = _clustered(2)
    res = accuracy(np.zeros(clusters.size), clusters, quantity="binary")
    sizes = np.bincount(clusters).astype(float)
    worst = np.sum(sizes**2) / np.sum(sizes)
    assert res.deff_method == "worst case" and res.deff == pytest.approx(worst)
    assert res.ci_high == pytest.approx(proportion_confint(0, clusters.size / worst, method="wilson")[1])
    # wider than if the expressions were independent
    assert res.ci_high > accuracy(np.zeros(clusters.size), quantity="binary").ci_high


def test_clustered_numeric_accuracy_uses_the_cluster_robust_t():
    rng = np.random.default_rng(4)
    clusters = np.repeat(np.arange(12), 3)
    values = rng.random(36)
    res = accuracy(values, clusters, quantity="bounded")
    se = math.sqrt(_ratio_var(values, clusters))
    assert res.se == pytest.approx(se)
    assert (res.ci_low, res.ci_high) == pytest.approx(student_t.interval(0.95, 11, loc=values.mean(), scale=se))


def test_sign_flip_with_one_pair_per_image_is_the_exact_mcnemar_test():
    res = sign_flip_test(BASE, ABL)
    assert res.method == "exact" and res.pvalue == pytest.approx(exact_mcnemar(BASE, ABL).pvalue)
    assert res.pvalue == pytest.approx(binomtest(1, 12, 0.5).pvalue)
    assert sign_flip_test(BASE, BASE).pvalue == 1.0 and sign_flip_test(BASE, BASE).n_informative_clusters == 0


def test_sign_flip_matches_scipy_permutation_test_on_image_totals():
    base, abl, clusters = _clustered(3, n_images=14)
    res = sign_flip_test(base, abl, clusters)
    tot_b = np.bincount(clusters, weights=base)
    tot_a = np.bincount(clusters, weights=abl)
    ref = permutation_test((tot_b, tot_a), lambda x, y, axis: np.sum(x - y, axis=axis), vectorized=True,
                           permutation_type="samples", n_resamples=np.inf)  # all 2^14 sign patterns
    assert res.method == "exact" and res.pvalue == pytest.approx(ref.pvalue)
    d = tot_b - tot_a
    assert res.statistic == pytest.approx(d.sum())
    assert res.durkalski_chi2 == pytest.approx(d.sum() ** 2 / np.sum(d**2))  # Durkalski et al. 2003, eq. (2)
    assert res.durkalski_pvalue == pytest.approx(chi2.sf(res.durkalski_chi2, 1))


def test_sign_flip_of_numeric_scores_is_monte_carlo_and_agrees_with_scipy():
    base, abl, clusters = _clustered(4, n_images=12)
    rng = np.random.default_rng(0)
    base = base * rng.uniform(0.5, 1.0, base.size)
    res = sign_flip_test(base, abl, clusters, n_resamples=20_000, seed=1)
    tot_b = np.bincount(clusters, weights=base)
    tot_a = np.bincount(clusters, weights=abl)
    ref = permutation_test((tot_b, tot_a), lambda x, y, axis: np.sum(x - y, axis=axis), vectorized=True,
                           permutation_type="samples", n_resamples=np.inf)
    assert res.method == "monte carlo" and res.n_resamples == 20_000
    assert res.pvalue == pytest.approx(ref.pvalue, abs=0.01)
    assert res == sign_flip_test(base, abl, clusters, n_resamples=20_000, seed=1)


def test_tango_interval_with_no_discordant_pairs_is_the_wilson_bound():
    low, high = tango_interval(0, 0, 100)
    assert high == pytest.approx(proportion_confint(0, 100, method="wilson")[1], abs=1e-9)  # z^2 / (n + z^2)
    assert low == pytest.approx(-high)
    assert 0.036 < high < 0.038


def test_tango_statistic_is_mcnemar_at_zero_and_the_interval_inverts_it():
    lost, gained, n = 11, 1, 20
    stat = tango_statistic(lost, gained, n, 0.0)
    table = [[7, lost], [gained, 1]]
    assert stat**2 == pytest.approx(mcnemar(table, exact=False, correction=False).statistic)
    low, high = tango_interval(lost, gained, n)
    z = norm.ppf(0.975)
    assert tango_statistic(lost, gained, n, low) == pytest.approx(z)
    assert tango_statistic(lost, gained, n, high) == pytest.approx(-z)
    grid = np.linspace(-0.99, 0.99, 19801)
    inside = grid[[abs(tango_statistic(lost, gained, n, d)) <= z for d in grid]]
    assert (inside.min(), inside.max()) == pytest.approx((low, high), abs=2e-4)
    assert tango_interval(gained, lost, n) == pytest.approx((-high, -low))
    assert tango_interval(lost, gained, n, alpha=0.1)[0] > low


def test_paired_drop_is_tango_on_design_effect_adjusted_counts():
    base, abl, clusters = _clustered(5)
    res = paired_drop(base, abl, clusters, n_resamples=500)
    d = base - abl
    lost, gained, n = int(np.sum(d > 0)), int(np.sum(d < 0)), d.size
    naive = ((lost + gained) / n - d.mean() ** 2) / n
    deff = max(1.0, _ratio_var(d, clusters) / naive)
    assert res.method == "tango score, design-effect adjusted" and res.deff == pytest.approx(deff)
    assert (res.ci_low, res.ci_high) == pytest.approx(tango_interval(lost / deff, gained / deff, n / deff))
    assert res.drop == pytest.approx(d.mean()) and (res.lost, res.gained) == (lost, gained)
    assert res.bootstrap["method"] == "bca" and res.bootstrap["n_clusters"] == 40
    plain = paired_drop(base, abl, None, bootstrap=False)
    assert plain.deff == 1.0 and (plain.ci_low, plain.ci_high) == pytest.approx(tango_interval(lost, gained, n))


def test_paired_drop_with_no_discordant_pair_is_not_degenerate():
    base, _, clusters = _clustered(6)
    res = paired_drop(base, base, clusters)
    sizes = np.bincount(clusters).astype(float)
    worst = np.sum(sizes**2) / np.sum(sizes)
    assert res.drop == 0.0 and res.deff_method == "worst case" and res.deff == pytest.approx(worst)
    assert res.ci_low < 0 < res.ci_high
    assert res.ci_high == pytest.approx(tango_interval(0, 0, base.size / worst)[1])
    assert res.bootstrap["degenerate"] and res.bootstrap["ci_low"] == res.bootstrap["ci_high"] == 0.0


def test_bca_bootstrap_is_scipys_on_image_totals():
    base, abl, clusters = _clustered(7)
    res = paired_bootstrap_drop(base, abl, clusters, n_resamples=999, seed=3)
    d = base - abl
    sums, counts = np.bincount(clusters, weights=d), np.bincount(clusters).astype(float)
    ref = bootstrap((sums, counts), lambda s, c, axis: s.sum(axis) / c.sum(axis), paired=True, vectorized=True,
                    method="BCa", n_resamples=999, random_state=np.random.default_rng(3))
    assert (res.ci_low, res.ci_high) == pytest.approx((ref.confidence_interval.low, ref.confidence_interval.high))
    assert res.drop == pytest.approx(d.mean()) and res.n_clusters == 40 and res.clustered and not res.degenerate
    assert res == paired_bootstrap_drop(base, abl, clusters, n_resamples=999, seed=3)
    with pytest.raises(ValueError, match="length"):
        paired_bootstrap_drop(base, abl[:-1])
    with pytest.raises(ValueError, match="length"):
        paired_drop(base, abl[:-1])


# ----------------------------------------------------------------------------- intervals chosen by the quantity
def test_the_interval_follows_the_quantity_not_the_values_that_occurred():
    """A patching recovery of exactly 0 in every pair is a continuous ratio that showed no spread, not 0/1 outcomes:
    no Wilson interval (which would claim [0, 49]% on 7 pairs); a zero-width t interval flagged as degenerate."""
    clusters = np.array([0, 0, 1, 2, 2, 3, 4])
    zeros = np.zeros(7)
    ratio = accuracy(zeros, clusters, quantity="unbounded")
    assert ratio.method.startswith("t") and ratio.degenerate and ratio.quantity == "unbounded"
    assert (ratio.ci_low, ratio.ci_high, ratio.se) == (0.0, 0.0, 0.0)
    ones = accuracy(np.ones(7), clusters, quantity="unbounded")  # the noising direction's "everything survives"
    assert (ones.ci_low, ones.ci_high) == (1.0, 1.0) and ones.degenerate
    # the same zeros as 0/1 outcomes keep the binomial bound of 0 of n (worst-case design effect)
    binary = accuracy(zeros, clusters, quantity="binary")
    assert binary.method == "wilson" and binary.degenerate and binary.ci_high > 0.2


def test_near_constant_and_ordinary_ratios_get_the_cluster_robust_t():
    clusters = np.repeat(np.arange(6), 2)
    near = np.zeros(12)
    near[3] = 1e-6
    res = accuracy(near, clusters, quantity="unbounded")
    assert not res.degenerate and res.method == "t" and res.ci_low < near.mean() < res.ci_high
    values = np.random.default_rng(5).normal(0.3, 0.4, 12)  # ratios outside [0, 1] are fine when unbounded
    res = accuracy(values, clusters, quantity="unbounded")
    se = math.sqrt(_ratio_var(values, clusters))
    assert (res.ci_low, res.ci_high) == pytest.approx(student_t.interval(0.95, 5, loc=values.mean(), scale=se))


def test_bounded_scores_are_clipped_to_the_unit_interval_and_checked():
    values = np.array([0.0, 0.0, 0.0, 0.02, 0.9])
    res = accuracy(values, quantity="bounded")
    t_low = student_t.interval(0.95, 4, loc=values.mean(), scale=values.std(ddof=1) / math.sqrt(5))[0]
    assert t_low < 0 and res.ci_low == 0.0  # clipped where the t interval leaves [0, 1]
    with pytest.raises(ValueError, match="quantity 'bounded' needs scores in \\[0, 1\\], got 1.5"):
        accuracy(np.array([0.2, 1.5]), quantity="bounded")
    with pytest.raises(ValueError, match="quantity 'binary' needs 0/1 outcomes, got 0.5"):
        accuracy(np.array([1.0, 0.5]), quantity="binary")
    with pytest.raises(ValueError, match="quantity 'ratio'"):
        accuracy(np.array([1.0]), quantity="ratio")


# ----------------------------------------------------------------------------------- scipy's result contract
def test_every_interval_is_one_confidence_interval_type():
    """Accuracy, drop, bootstrap and Tango results give their interval as `ConfidenceInterval(low, high)`, the
    named tuple scipy.stats returns (same fields as `scipy.stats.bootstrap(...).confidence_interval`)."""
    from scipy.stats import bootstrap as scipy_bootstrap

    from vrh_lmms.base.stats import ConfidenceInterval, paired_bootstrap_drop, paired_drop, tango_interval

    scipy_ci = scipy_bootstrap((BASE.astype(float),), np.mean, n_resamples=99, random_state=0).confidence_interval
    assert type(scipy_ci)._fields == ConfidenceInterval._fields == ("low", "high")
    acc = accuracy(BASE, quantity="binary")
    drop = paired_drop(BASE, ABL, n_resamples=200)
    boot = paired_bootstrap_drop(BASE, ABL, n_resamples=200)
    tango = tango_interval(8, 2, 20)
    for result, ci in ((acc, acc.confidence_interval), (drop, drop.confidence_interval),
                       (boot, boot.confidence_interval)):
        assert isinstance(ci, ConfidenceInterval) and ci == (result.ci_low, result.ci_high)
    assert isinstance(tango, ConfidenceInterval) and tango.low < 0.3 < tango.high


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_one_and_two_sided_tests_match_scipy(alternative):
    """With one pair per image the sign-flip test is the exact McNemar test, which is a binomial test of the lost
    pairs among the discordant ones: both agree with scipy.stats.binomtest for every `alternative`."""
    from scipy.stats import binomtest

    lost, gained = int(np.sum((BASE == 1) & (ABL == 0))), int(np.sum((BASE == 0) & (ABL == 1)))
    expected = binomtest(lost, lost + gained, 0.5, alternative=alternative).pvalue
    flip = sign_flip_test(BASE, ABL, alternative=alternative)
    mc = exact_mcnemar(BASE, ABL, alternative=alternative)
    assert flip.pvalue == pytest.approx(expected) and flip.alternative == alternative
    assert mc.pvalue == pytest.approx(expected) and mc.alternative == alternative
    numeric = sign_flip_test(BASE * 0.5 + 0.01, ABL * 0.5, alternative=alternative, n_resamples=4000, seed=1)
    assert numeric.method == "monte carlo" and numeric.alternative == alternative
    with pytest.raises(ValueError, match="alternative 'larger'"):
        sign_flip_test(BASE, ABL, alternative="larger")


def test_one_sided_tails_add_up():
    """For an exact null the two one-sided p-values add up to 1 + P(T = t_obs)."""
    rng = np.random.default_rng(3)
    clusters = np.repeat(np.arange(15), 3)
    base = (rng.random(45) < 0.8).astype(float)
    abl = np.where(rng.random(45) < 0.3, 0.0, base)
    greater = sign_flip_test(base, abl, clusters, alternative="greater").pvalue
    less = sign_flip_test(base, abl, clusters, alternative="less").pvalue
    two = sign_flip_test(base, abl, clusters).pvalue
    assert greater < 0.05 < less and greater <= two and greater + less > 1.0
