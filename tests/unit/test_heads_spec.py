"""Head specs, heads files and their validation."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import Geometry, HeadRef, parse_head, resolve_spec
from vrh_lmms.base.heads.heads_file import HeadsFile, load_heads_file, ranking_from_scores, save_heads_file

G = Geometry(layers=4, heads=8, kv_heads=2, head_dim=16)


def make_file(tmp_path, geometry=G, seed=0, name="heads.json"):
    scores = np.random.default_rng(seed).random((geometry.layers, geometry.heads))
    hf = HeadsFile(model={"id": "tiny", "family": "qwen2_5_vl"}, geometry=geometry, scores=scores,
                   ranking=ranking_from_scores(scores), scoring={"query": "out", "key": "sum", "aggregate": "mean"})
    save_heads_file(hf, tmp_path / name)
    return load_heads_file(tmp_path / name), scores


def test_parse_head_and_bad_token():
    assert parse_head("L12H3") == HeadRef(12, 3)
    with pytest.raises(VRHError, match="L12X3"):
        parse_head("L12X3")


def test_explicit_spec_sorted_and_checked():
    hs = resolve_spec("L3H1;L0H7", G)
    assert hs.names == ["L0H7", "L3H1"] and hs.kind == "explicit" and hs.k == 2
    with pytest.raises(VRHError, match="L4H0 is outside"):
        resolve_spec("L4H0", G)
    with pytest.raises(VRHError, match="'Lx'"):
        resolve_spec("L1H1;Lx", G)
    with pytest.raises(VRHError, match="more than once"):
        resolve_spec("L1H1;L1H1", G)


def test_none_is_baseline():
    for spec in ("none", "", None, "NONE"):
        hs = resolve_spec(spec, G)
        assert hs.heads == () and hs.kind == "baseline"


def test_topk_follows_scores(tmp_path):
    hf, scores = make_file(tmp_path)
    hs = resolve_spec("top5", G, heads_file=hf)
    flat = sorted(((-scores[l, h], l, h) for l in range(4) for h in range(8)))[:5]
    assert set(hs.heads) == {HeadRef(l, h) for _, l, h in flat}
    assert hs.heads_file["sha256"] == hf.sha256
    with pytest.raises(VRHError, match="needs a heads file"):
        resolve_spec("top5", G)


def test_random_is_seeded_uniform():
    a, b, c = (resolve_spec("random6", G, seed=s) for s in (1, 1, 2))
    assert a.heads == b.heads and a.heads != c.heads and len(set(a.heads)) == 6
    # Uniform over all heads: every head gets drawn at a similar rate across seeds.
    counts = Counter(h for s in range(3000) for h in resolve_spec("random4", G, seed=s).heads)
    rate = np.array([counts[h] for h in G.all_heads()]) / 3000
    assert len(counts) == G.total_heads and np.allclose(rate, 4 / 32, atol=0.03)


def test_random_skip_layer0_never_draws_layer0_and_covers_the_rest():
    draws = [resolve_spec("random4:skip_layer0", G, seed=s) for s in range(400)]
    assert all(d.kind == "random" and d.k == 4 and d.spec == "random4:skip_layer0" for d in draws)
    drawn = {h for d in draws for h in d.heads}
    assert drawn == {h for h in G.all_heads() if h.layer != 0}
    # with the pool suffix it still skips layer 0, and asking for more than the other layers hold is refused
    assert all(h.layer for h in resolve_spec("random24:skip_layer0@all", G).heads)
    with pytest.raises(VRHError, match="random25"):
        resolve_spec("random25:skip_layer0", G)


def test_sweep_random_skip_layer0_plans_the_same_ids_with_the_skip_spec():
    from vrh_lmms.base.heads.plan import plan_configurations

    plain = plan_configurations([3], 2, False, ["zero"])
    skip = plan_configurations([3], 2, False, ["zero"], random_skip_layer0=True)
    assert [c.id for c in plain] == [c.id for c in skip]
    assert {c.spec for c in skip if c.kind == "random"} == {"random3:skip_layer0"}
    assert {c.spec for c in plain if c.kind == "random"} == {"random3"}


def test_layer_matched_same_layers_other_heads(tmp_path):
    hf, _ = make_file(tmp_path)
    top = resolve_spec("top6", G, heads_file=hf)
    for spec in ("like:top6", "random_like:top6", "layer_matched6"):
        lm = resolve_spec(spec, G, heads_file=hf, seed=3)
        assert lm.kind == "layer_matched"
        assert Counter(h.layer for h in lm.heads) == Counter(h.layer for h in top.heads)
        assert not set(lm.heads) & set(top.heads)


def test_layer_matched_impossible_is_refused(tmp_path):
    g = Geometry(layers=1, heads=3, kv_heads=1, head_dim=4)
    hf, _ = make_file(tmp_path, geometry=g)
    with pytest.raises(VRHError, match="layer 0"):
        resolve_spec("like:top2", g, heads_file=hf)


def test_geometry_mismatch_refused_unless_forced(tmp_path):
    hf, _ = make_file(tmp_path, geometry=Geometry(layers=4, heads=8, kv_heads=4, head_dim=16))
    with pytest.raises(VRHError, match="allow_cross_model"):
        resolve_spec("top3", G, heads_file=hf)
    assert resolve_spec("top3", G, heads_file=hf, allow_cross_model=True).k == 3


def test_heads_file_validation_names_field(tmp_path):
    hf, _ = make_file(tmp_path)
    data = json.loads((tmp_path / "heads.json").read_text())
    bad = dict(data, ranking=data["ranking"][:3] + ["L9H9"])
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(VRHError, match="'ranking' item 3"):
        load_heads_file(tmp_path / "bad.json")
    bad = dict(data, scores=[[1.0]])
    (tmp_path / "bad2.json").write_text(json.dumps(bad))
    with pytest.raises(VRHError, match="'scores' has shape"):
        load_heads_file(tmp_path / "bad2.json")
    bad = {k: v for k, v in data.items() if k != "geometry"}
    (tmp_path / "bad3.json").write_text(json.dumps(bad))
    with pytest.raises(VRHError, match="missing field 'geometry'"):
        load_heads_file(tmp_path / "bad3.json")
    (tmp_path / "bad4.json").write_text(json.dumps(dict(data, schema="vrh-heads/9")))
    with pytest.raises(VRHError, match="not supported"):
        load_heads_file(tmp_path / "bad4.json")


def test_save_refuses_overwrite(tmp_path):
    hf, _ = make_file(tmp_path)
    with pytest.raises(VRHError, match="exists"):
        save_heads_file(hf, tmp_path / "heads.json")
    save_heads_file(hf, tmp_path / "heads.json", force=True)


def test_head_name_is_what_parse_head_reads_back():
    """Every module writes head names through head_name (numpy integers included), so rankings and pruned-head lists
    parse as head specs."""
    import numpy as np

    from vrh_lmms.base.heads.geometry import HeadRef, head_name, parse_head

    assert head_name(np.int64(4), 12) == "L4H12"
    assert all(parse_head(head_name(layer, head)) == HeadRef(layer, head) for layer in range(3) for head in range(20))


# ---------------------------------------------------------------------------------- control pools and dead heads
DEAD = tuple(HeadRef(l, h) for l in range(4) for h in range(8) if (l, h) not in {(0, 0), (1, 1), (1, 2), (2, 5)}
             and h % 2 == 0)  # half of every layer's heads (but four) write nothing


def _pre_pool_random(geometry, k, seed):
    """The draw `random<K>` made before control pools existed (rng.choice over every head index)."""
    idx = np.random.default_rng(seed).choice(geometry.total_heads, size=k, replace=False)
    return tuple(sorted(HeadRef(int(i) // geometry.heads, int(i) % geometry.heads) for i in idx))


def test_live_controls_never_hold_a_dead_head(tmp_path):
    hf, _ = make_file(tmp_path)
    for seed in range(200):
        for spec in ("random6", "like:top6"):
            hs = resolve_spec(spec, G, heads_file=hf, seed=seed, dead=DEAD)
            assert not set(hs.heads) & set(DEAD) and hs.pool == "live" and hs.dead == ()
    # uniform over the live heads: every live head drawn at a similar rate, no dead one ever
    counts = Counter(h for s in range(3000) for h in resolve_spec("random4", G, seed=s, dead=DEAD).heads)
    live = [h for h in G.all_heads() if h not in DEAD]
    rate = np.array([counts[h] for h in live]) / 3000
    assert set(counts) == set(live) and np.allclose(rate, 4 / len(live), atol=0.035)


def test_pool_all_reproduces_the_uniform_draws_and_names_their_dead_heads(tmp_path):
    for seed in range(50):
        hs = resolve_spec("random6", G, seed=seed, dead=DEAD, pool="all")
        assert hs.heads == _pre_pool_random(G, 6, seed) and hs.pool == "all"
        assert hs.dead == tuple(h for h in hs.heads if h in DEAD)
        assert resolve_spec("random6@all", G, seed=seed, dead=DEAD).heads == hs.heads  # the suffix, any default
        assert resolve_spec("random6@live", G, seed=seed, dead=DEAD, pool="all").heads == \
            resolve_spec("random6", G, seed=seed, dead=DEAD).heads
    # a model without dead heads: both pools give today's draws
    assert resolve_spec("random6", G, seed=7).heads == _pre_pool_random(G, 6, 7)
    held = sum(bool(resolve_spec("random6", G, seed=s, dead=DEAD, pool="all").dead) for s in range(200))
    assert held > 150  # the uniform draws this replaces held dead heads nearly always
    assert resolve_spec("random6@all", G, seed=1, dead=DEAD).record()["dead_heads"]


def test_a_layer_matched_draw_that_live_heads_cannot_fill_is_unavailable_not_padded(tmp_path):
    from vrh_lmms.base.heads.spec import ControlUnavailable

    g = Geometry(layers=2, heads=5, kv_heads=1, head_dim=4)
    scores = np.zeros((2, 5))
    scores[1, 0], scores[1, 1], scores[0, 0] = 3.0, 2.0, 1.0  # top3 = L1H0, L1H1, L0H0
    hf = HeadsFile(model={"id": "tiny"}, geometry=g, scores=scores, ranking=ranking_from_scores(scores))
    others = (HeadRef(1, 2), HeadRef(1, 3), HeadRef(1, 4))  # layer 1's other heads all write nothing
    with pytest.raises(ControlUnavailable, match="layer 1: the top set holds 2 of its 5 heads, and no other live "
                                                 "head is left \\(all 3 of its others write nothing\\)"):
        resolve_spec("like:top3", g, heads_file=hf, dead=others)
    with pytest.raises(ControlUnavailable, match="layer 1: the top set holds 2 of its 5 heads, and only 1 other live "
                                                 "head is left \\(2 of its 3 others write nothing\\)"):
        resolve_spec("like:top3", g, heads_file=hf, dead=others[:2])
    drawn = resolve_spec("like:top3", g, heads_file=hf, dead=others, pool="all")  # the paper's definition
    assert len(drawn.dead) == 2 and set(drawn.dead) <= set(others)
    assert not set(resolve_spec("like:top3", g, heads_file=hf, dead=(HeadRef(1, 2),)).heads) & {HeadRef(1, 2)}


def test_top_k_keeps_its_ranking_and_names_its_dead_heads(tmp_path):
    hf, _ = make_file(tmp_path)
    top = resolve_spec("top8", G, heads_file=hf, dead=DEAD)
    assert top.heads == tuple(sorted(hf.ranking[:8])) and top.pool is None
    assert top.dead == tuple(h for h in top.heads if h in DEAD) and top.record()["dead_heads"] == \
        [str(h) for h in top.dead]
    with pytest.raises(VRHError, match="control pool 'some'"):
        resolve_spec("random3", G, pool="some")


def test_image_matched_draws_from_live_heads_only():
    """The image-matched control leaves dead heads out under the live pool, and may draw them under pool=all."""
    from vrh_lmms.base.heads.controls import image_matched_heads

    scores = np.arange(G.total_heads, dtype=float)[::-1].reshape(G.layers, G.heads)
    ranking = ranking_from_scores(scores)
    mass = np.full((G.layers, G.heads), 0.5)  # every head matches every top head: the pool decides alone
    drawn_all = set()
    for seed in range(100):
        live = image_matched_heads(ranking, mass, G, 3, seed, 0.05, frozenset(DEAD))
        assert not set(live) & set(DEAD) and not set(live) & set(ranking[:6])
        drawn_all |= set(image_matched_heads(ranking, mass, G, 3, seed, 0.05))
    assert drawn_all & set(DEAD)  # without the exclusion dead heads are drawn: the test can fail


def test_random_outside_draws_k_heads_outside_the_top_k_from_the_pool(tmp_path):
    """The paper's control for its extra models: K random heads, none of the top K, live ones by default."""
    from vrh_lmms.base.heads.plan import plan_configurations

    hf, _ = make_file(tmp_path)
    top = set(hf.ranking[:6])
    seen = set()
    for seed in range(300):
        hs = resolve_spec("random_outside:top6", G, heads_file=hf, seed=seed, dead=DEAD)
        assert hs.kind == "random_outside" and hs.pool == "live" and len(hs.heads) == 6
        assert not set(hs.heads) & top and not set(hs.heads) & set(DEAD)
        seen |= set(hs.heads)
    assert seen == set(G.all_heads()) - top - set(DEAD)  # every eligible head gets drawn
    assert resolve_spec("random_outside6", G, heads_file=hf, seed=4).heads == \
        resolve_spec("random_outside:top6", G, heads_file=hf, seed=4).heads
    with pytest.raises(VRHError, match="needs a heads file"):
        resolve_spec("random_outside:top6", G)
    ids = [c.id for c in plan_configurations([2], 2, False, ["zero"], controls=["random-outside"],
                                             control_tolerance=0.1)]
    specs = {c.id: c.spec for c in plan_configurations([2], 2, False, ["zero"], controls=["random-outside"],
                                                       control_tolerance=0.1)}
    assert "random_outside2_s1" in ids and specs["random_outside2_s1"] == "random_outside:top2"  # no tolerance
