"""compare-heads statistics and comparison (issue 29 item 4, issue 28's Fig 7) against independent references: the
hypergeometric tail against scipy and against the formula with math.comb, the chance level k*k/N, Jaccard by hand,
Spearman against scipy on the flattened maps; the paper's published pair (Qwen2.5-VL-7B vs InternVL3-8B, RefCOCO)
against the overlap its Fig 7 prints; refusal across geometries; score shares (Fig 5) by hand."""

from __future__ import annotations

from math import comb

import numpy as np
import pytest
from scipy import stats as sps

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import Geometry
from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores
from vrh_lmms.base.stats import hypergeom_tail, score_spearman, share_above, topk_overlap
from vrh_lmms.report.head_compare import compare, from_heads_file, load_inputs


def _tail_by_formula(x: int, n: int, k: int) -> float:
    """P(X >= x), X the overlap of two k-sets of n heads: sum over i >= x of C(k, i) C(n - k, k - i) / C(n, k)."""
    return sum(comb(k, i) * comb(n - k, k - i) for i in range(x, k + 1)) / comb(n, k)


def test_hypergeometric_tail_hand_checked_784_heads_k20_overlap15():
    p = hypergeom_tail(15, 784, 20, 20)
    # abs=0 throughout: pytest.approx's default absolute tolerance (1e-12) would pass any p value this small
    assert p == pytest.approx(_tail_by_formula(15, 784, 20), rel=1e-9, abs=0)
    assert p == pytest.approx(1.34234e-23, rel=1e-5, abs=0)  # the formula's exact value, written out


@pytest.mark.parametrize(("x", "n", "ka", "kb"), [(0, 96, 9, 9), (1, 96, 9, 9), (3, 96, 9, 9), (9, 96, 9, 9),
                                                   (2, 50, 5, 8), (18, 1152, 20, 20)])
def test_hypergeometric_tail_matches_scipy(x, n, ka, kb):
    want = float(sps.hypergeom(M=n, n=ka, N=kb).sf(x - 1))  # P(X > x - 1)
    assert hypergeom_tail(x, n, ka, kb) == pytest.approx(want, rel=1e-9, abs=0)


def test_topk_overlap_chance_jaccard_and_p():
    a = ["L0H1", "L0H2", "L1H0", "L2H3", "L3H3"]
    b = ["L0H2", "L1H0", "L3H3", "L4H4", "L5H5"]
    ov = topk_overlap(a, b, population=40)
    assert ov.overlap == 3
    assert ov.chance == pytest.approx(5 * 5 / 40)
    assert ov.jaccard == pytest.approx(3 / 7)  # |{L0H2, L1H0, L3H3}| / |7 distinct heads|
    assert ov.p_value == pytest.approx(_tail_by_formula(3, 40, 5), rel=1e-9, abs=0)
    with pytest.raises(ValueError, match="twice"):
        topk_overlap(["L0H1", "L0H1"], b, 40)


def test_spearman_over_all_heads_matches_scipy_and_masks():
    rng = np.random.default_rng(7)
    a = rng.gamma(0.3, size=(6, 16))
    b = a + rng.normal(0, 0.2, size=a.shape)
    b[0, :4] = b[0, 4]  # ties
    assert score_spearman(a, b) == pytest.approx(sps.spearmanr(a.ravel(), b.ravel())[0], rel=1e-12)
    mask = rng.random(a.shape) > 0.5
    assert score_spearman(a, b, mask) == pytest.approx(sps.spearmanr(a[mask], b[mask])[0], rel=1e-12)
    assert np.isnan(score_spearman(a, np.zeros_like(a)))
    with pytest.raises(ValueError, match="shape"):
        score_spearman(a, b.T)


def test_share_above_thresholds_by_hand():
    scores = np.array([[0.0, 2e-3, 6e-3], [1e-3, 5e-3, 0.2]])
    assert share_above(scores, [1e-3, 5e-3]) == {1e-3: 4 / 6, 5e-3: 2 / 6}  # strictly above


def _heads_file(scores: np.ndarray, model: str = "m") -> HeadsFile:
    layers, heads = scores.shape
    return HeadsFile({"id": model}, Geometry(layers, heads, heads, 8), scores, ranking_from_scores(scores),
                     scoring={"cell": "out,sum,mean"})


def test_compare_pair_agrees_with_scipy_on_the_same_maps():
    rng = np.random.default_rng(3)
    a = rng.gamma(0.3, size=(6, 16))
    b = 0.5 * a + rng.gamma(0.3, size=a.shape)
    items = [from_heads_file(_heads_file(a, "A"), "a.json"), from_heads_file(_heads_file(b, "B"), "b.json")]
    block = compare(items, k=9)
    pair = block["pairs"][0]
    top_a = {divmod(int(i), 16) for i in np.argsort(-a.ravel(), kind="stable")[:9]}
    top_b = {divmod(int(i), 16) for i in np.argsort(-b.ravel(), kind="stable")[:9]}
    shared = len(top_a & top_b)
    assert pair["overlap"] == shared
    assert pair["chance"] == pytest.approx(81 / 96)
    assert pair["p_value"] == pytest.approx(float(sps.hypergeom.sf(shared - 1, 96, 9, 9)), abs=0)
    assert pair["jaccard"] == pytest.approx(shared / len(top_a | top_b))
    assert pair["spearman"] == pytest.approx(sps.spearmanr(a.ravel(), b.ravel()).statistic)
    assert block["overlap_matrix"] == [[9, shared], [shared, 9]]


def test_paper_pair_overlap_is_the_figure_the_paper_prints():
    """Fig 7: Qwen2.5-VL-7B and InternVL3-8B (same backbone) share 15 of their top-20 RefCOCO heads; Qwen3-VL-8B and
    InternVL3.5-8B 18. Published lists carry no scores, so Spearman is not available."""
    qwen, intern = load_inputs(["paper:Qwen2.5-VL-7B:refcoco", "paper:internvl3-8b"])
    pair = compare([qwen, intern], k=20)["pairs"][0]
    assert pair["overlap"] == 15 and pair["population"] == 784
    assert pair["p_value"] == pytest.approx(_tail_by_formula(15, 784, 20), rel=1e-9, abs=0)
    assert pair["spearman"] is None and "no scores" in pair["note"]
    assert compare(load_inputs(["paper:Qwen3-VL-8B", "paper:InternVL3.5-8B"]), k=20)["pairs"][0]["overlap"] == 18
    with pytest.raises(VRHError, match="ranks only 20 heads"):
        compare([qwen, intern], k=21)
    with pytest.raises(VRHError, match="publishes heads on .*not 'coco'"):
        load_inputs(["paper:Qwen2.5-VL-7B:coco"])


def test_different_geometries_refused_in_one_line_unless_allowed():
    a = from_heads_file(_heads_file(np.arange(96.0).reshape(6, 16)), "a.json")
    b = from_heads_file(_heads_file(np.arange(96.0).reshape(8, 12)), "b.json")
    with pytest.raises(VRHError, match=r"differ in geometry .*a.json 6 x 16, b.json 8 x 12.*--allow-cross-geometry") \
            as info:
        compare([a, b], k=5)
    assert "\n" not in str(info.value)
    pair = compare([a, b], k=5, allow_cross_geometry=True)["pairs"][0]
    assert pair["spearman"] is None and pair["p_value"] is None and pair["chance"] is None
    assert pair["overlap"] == len(set(a.ranking[:5]) & set(b.ranking[:5]))


def test_heads_that_write_nothing_are_left_out_of_live_statistics():
    """A pruned head attends uniformly (the demo models have 54 of them, all with one score): the live-head Spearman
    and score shares leave out every head either file lists under dead_heads."""
    from vrh_lmms.report.score_distribution import distribution

    scores = np.array([[0.0139, 0.0139, 0.2], [0.002, 0.0139, 0.0]])
    hf = _heads_file(scores)
    hf.extra = {"dead_heads": {"heads": ["L0H0", "L0H1", "L1H1"]}}
    row = distribution([from_heads_file(hf, "a.json")], [1e-3, 5e-3])["inputs"][0]
    assert row["above"] == {"0.001": pytest.approx(5 / 6), "0.005": pytest.approx(4 / 6)}
    assert row["live"] == {"heads": 3, "above": {"0.001": pytest.approx(2 / 3), "0.005": pytest.approx(1 / 3)}}

    rng = np.random.default_rng(11)
    a, b = rng.gamma(0.3, size=(4, 8)), rng.gamma(0.3, size=(4, 8))
    ha, hb = _heads_file(a, "A"), _heads_file(b, "B")
    ha.extra = {"dead_heads": {"heads": ["L0H0", "L3H7"]}}
    hb.extra = {"dead_heads": {"heads": ["L1H2"]}}
    pair = compare([from_heads_file(ha, "a.json"), from_heads_file(hb, "b.json")], k=3)["pairs"][0]
    live = np.ones(a.shape, dtype=bool)
    live[0, 0] = live[3, 7] = live[1, 2] = False
    assert pair["n_live"] == 29
    assert pair["spearman_live"] == pytest.approx(sps.spearmanr(a[live], b[live]).statistic, rel=1e-12)
    assert pair["spearman"] == pytest.approx(sps.spearmanr(a.ravel(), b.ravel()).statistic, rel=1e-12)


def test_two_cells_of_one_discovery_compared_as_two_inputs(tmp_path):
    from vrh_lmms.base.heads.heads_file import save_heads_file

    rng = np.random.default_rng(5)
    sum_mean, argmax_mean = rng.gamma(0.3, size=(6, 16)), rng.gamma(0.3, size=(6, 16))
    cells = {c: {"scores": s.tolist(), "ranking": [str(h) for h in ranking_from_scores(s)]}
             for c, s in (("out,sum,mean", sum_mean), ("out,argmax,mean", argmax_mean))}
    hf = _heads_file(sum_mean, "Org/model")
    hf.cells = cells
    path = save_heads_file(hf, tmp_path / "heads.json")
    a, b = load_inputs([str(path), str(path)], ["out,sum,mean", "out,argmax,mean"])
    assert (a.label, b.label) == ("model [out,sum,mean]", "model [out,argmax,mean]")
    pair = compare([a, b], k=9)["pairs"][0]
    assert pair["spearman"] == pytest.approx(sps.spearmanr(sum_mean.ravel(), argmax_mean.ravel()).statistic)
    tops = [set(cells[c]["ranking"][:9]) for c in ("out,sum,mean", "out,argmax,mean")]
    assert pair["overlap"] == len(tops[0] & tops[1])
    with pytest.raises(VRHError, match="--cell given 2 times for 3 inputs"):
        load_inputs([str(path)] * 3, ["out,sum,mean", "out,argmax,mean"])


def test_live_topk_overlap_ranks_without_dead_heads_and_draws_chance_from_the_live_pool():
    """A pruned model ranks its live heads first, so chance over all heads is too low: the live overlap takes each
    ranking without the heads either model has dead, its top-k, and scipy's hypergeometric tail over the live pool.
    One file lists no dead heads (a backbone before pruning): the other's dead heads still leave the pool."""
    rng = np.random.default_rng(5)
    a, b = rng.gamma(0.5, size=(4, 8)), rng.gamma(0.5, size=(4, 8))
    b[0, :4] += 5.0  # B's best heads: L0H0-L0H3, two of them dead in A
    ha, hb = _heads_file(a, "A"), _heads_file(b, "B")
    ha.extra = {"dead_heads": {"heads": ["L0H0", "L0H1", "L2H5"]}}
    hb.extra = {"dead_heads": {"heads": []}}
    k = 4
    pair = compare([from_heads_file(ha, "a.json"), from_heads_file(hb, "b.json")], k=k)["pairs"][0]
    dead = {"L0H0", "L0H1", "L2H5"}
    names = [f"L{l}H{h}" for l in range(4) for h in range(8)]
    order = lambda m: [n for _, n in sorted(zip(-m.ravel(), names))]  # noqa: E731
    top_a = [n for n in order(a) if n not in dead][:k]
    top_b = [n for n in order(b) if n not in dead][:k]
    shared = len(set(top_a) & set(top_b))
    assert pair["n_live"] == 29 and pair["overlap_live"] == shared
    assert set(pair["shared_live"]) == set(top_a) & set(top_b)
    assert pair["chance_live"] == pytest.approx(k * k / 29)
    assert pair["p_value_live"] == pytest.approx(float(sps.hypergeom.sf(shared - 1, 29, k, k)) if shared else 1.0)
    assert "L0H0" not in top_b and {"L0H2", "L0H3"} <= set(top_b)
