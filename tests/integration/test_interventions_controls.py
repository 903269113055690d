"""Sharper controls: image-matched heads match the top heads' image mass within the stated tolerance, the
content-free query replaces exactly the expression, and the sparsity figure equals a direct count."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import Geometry
from vrh_lmms.base.heads.controls import image_matched_heads
from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores
from vrh_lmms.base.heads.plan import plan_configurations
from vrh_lmms.base.heads.spec import IMAGE_MATCH_TOLERANCE, resolve_spec
from vrh_lmms.runs.discovery.controls import content_free_prompt, corrected_stats, half_mass_share
from vrh_lmms.runs.discovery.queries import token_pieces

GEOMETRY = Geometry(layers=6, heads=8, kv_heads=8, head_dim=16)


def heads_file(seed: int = 0) -> HeadsFile:
    rng = np.random.default_rng(seed)
    scores = rng.random((GEOMETRY.layers, GEOMETRY.heads))
    mass = rng.random((GEOMETRY.layers, GEOMETRY.heads)) * 0.6
    return HeadsFile({"id": "m"}, GEOMETRY, scores, ranking_from_scores(scores),
                     extra={"image_mass": {"query": "out", "scores": mass.tolist()}})


@pytest.mark.parametrize("k,tol", [(3, IMAGE_MATCH_TOLERANCE), (5, 0.05), (4, 0.1)])
def test_image_matched_heads_match_within_tolerance(k, tol):
    for seed in range(20):
        hf = heads_file(seed)
        mass = hf.image_mass()
        spec = f"image_matched:top{k}" + ("" if tol == IMAGE_MATCH_TOLERANCE else f"~{tol:g}")
        try:
            hs = resolve_spec(spec, GEOMETRY, heads_file=hf, seed=seed)
        except VRHError as exc:  # a draw may be impossible; then the message names the head and the tolerance
            assert "image-matched control impossible" in str(exc) and f"{tol:g}" in str(exc)
            continue
        top = hf.ranking[:k]
        assert hs.kind == "image_matched" and len(hs.heads) == k and len(set(hs.heads)) == k
        assert not set(hs.heads) & set(hf.ranking[:2 * k]), "image-matched heads must not be box-specific"
        # the draw pairs heads in rank order: re-derive the pairing and check every pair's mass difference
        paired = image_matched_heads(hf.ranking, mass, GEOMETRY, k, seed, tol)
        assert sorted(paired) == list(hs.heads)
        target = sorted(mass[h.layer, h.head] for h in top)
        got = sorted(mass[h.layer, h.head] for h in hs.heads)
        # matched one to one within tol implies the sorted masses also agree within tol
        assert np.all(np.abs(np.array(target) - np.array(got)) <= tol + 1e-12)
        assert abs(np.mean(target) - np.mean(got)) <= tol + 1e-12


def test_image_matched_pairs_each_top_head():
    """Constructed masses: each top head has exactly one admissible partner, so the draw is forced."""
    g = Geometry(2, 4, 4, 8)
    scores = np.array([[0.9, 0.8, 0.1, 0.2], [0.05, 0.06, 0.07, 0.08]])
    mass = np.array([[0.50, 0.20, 0.30, 0.90], [0.51, 0.99, 0.21, 0.70]])
    hf = HeadsFile({"id": "m"}, g, scores, ranking_from_scores(scores),
                   extra={"image_mass": {"scores": mass.tolist()}})
    # top-2 = L0H0 (0.50), L0H1 (0.20); top-4 excluded = also L0H3, L0H2; partners: L1H0 (0.51), L1H2 (0.21)
    hs = resolve_spec("image_matched:top2~0.02", g, heads_file=hf, seed=3)
    assert [str(h) for h in hs.heads] == ["L1H0", "L1H2"]
    with pytest.raises(VRHError, match="L0H0.*within 0.001"):
        resolve_spec("image_matched:top2~0.001", g, heads_file=hf, seed=0)
    with pytest.raises(VRHError, match="image_mass"):
        resolve_spec("image_matched2", g, heads_file=HeadsFile({"id": "m"}, g, scores, ranking_from_scores(scores)))


def test_plan_has_image_matched_configurations():
    ids = [c.id for c in plan_configurations([2], 2, True, ["zero"], controls=["image-matched"],
                                             control_tolerance=0.03)]
    assert ids == ["baseline", "top2", "random2_s0", "random2_s1", "layer_matched2_s0", "layer_matched2_s1",
                   "image_matched2_s0", "image_matched2_s1"]
    spec = plan_configurations([2], 1, False, ["zero"], controls=["image-matched"], control_tolerance=0.03)[-1].spec
    assert spec == "image_matched:top2~0.03"
    with pytest.raises(VRHError, match="--control"):
        plan_configurations([2], 1, False, ["zero"], controls=["box-matched"])


def test_half_mass_share_equals_direct_count():
    rng = np.random.default_rng(0)
    for _ in range(50):
        scores = rng.exponential(size=(4, 8)) ** 3 - 0.1
        positive = np.clip(scores.ravel(), 0, None)
        order = np.sort(positive)[::-1]
        n = next(i + 1 for i in range(order.size) if order[:i + 1].sum() >= 0.5 * positive.sum())
        out = half_mass_share(scores)
        assert out["half_mass_heads"] == n and out["half_mass_share"] == pytest.approx(n / 32)
        assert out["negative_scores"] == int((scores < 0).sum())
    assert half_mass_share(np.zeros((2, 2)))["half_mass_share"] is None
    one_hot = np.zeros((4, 8))
    one_hot[2, 3] = 1.0
    assert half_mass_share(one_hot)["half_mass_heads"] == 1


def test_corrected_stats_subtract_the_null_query():
    s = {"out_sum": np.array([[0.5, 0.2]]), "null_out_sum": np.array([[0.1, 0.3]]), "out_image_sum": np.ones((1, 2)),
         "in_sum": np.array([[0.4, 0.4]])}
    out = corrected_stats([s])[0]
    np.testing.assert_allclose(out["out_sum"], [[0.4, -0.1]])
    assert np.isnan(out["in_sum"]).all() and set(out) == {"out_sum", "in_sum"}


@pytest.mark.parametrize("family", ["qwen2_5_vl", "internvl", "paligemma"])
def test_content_free_prompt_replaces_only_the_expression(family, tiny_checkpoints):
    from vrh_lmms.model.tiny.inputs import load_tiny, processor_inputs

    _, processor = load_tiny(tiny_checkpoints(family))
    expression = "the red circle"
    batch = dict(processor_inputs(processor, n=1, texts=[expression]))
    tok = processor.tokenizer
    ids = batch["input_ids"]
    null = content_free_prompt(batch, tok, token_pieces(tok, ids[0].tolist()), expression)
    before = tok.decode(ids[0].tolist())
    after = tok.decode(null["input_ids"][0].tolist())
    na = tok.decode(tok("N/A", add_special_tokens=False)["input_ids"])  # word-level tiny vocabularies: "<unk> / a"
    assert before.count(expression) == 1 and after == before.replace(expression, na)
    for key, value in batch.items():
        if value.dim() == 2 and value.shape == ids.shape:
            assert null[key].shape == null["input_ids"].shape, key
        else:
            assert null[key] is value, key
    assert content_free_prompt(batch, tok, token_pieces(tok, ids[0].tolist()), "the purple ring") is None
    assert torch.equal(null["input_ids"][0, :5], ids[0, :5])
