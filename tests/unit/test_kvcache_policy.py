"""KV policies: retrieval keeps the groups of the best-ranked heads, random the same number of groups, uniform the
same evenly spaced image tokens in every group; sink and recent positions always stay."""

from __future__ import annotations

import numpy as np
import pytest

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import Geometry, HeadRef
from vrh_lmms.model.kvcache.policy import (
    dropped,
    evenly_spaced,
    image_kept_fraction,
    kv_bytes,
    random_policy,
    retrieval_policy,
    shared_drop,
    topk_budget,
    uniform_policy,
)

G = Geometry(layers=2, heads=4, kv_heads=2, head_dim=8)  # query heads 0,1 -> group 0; 2,3 -> group 1


def test_retrieval_groups_follow_the_best_head():
    ranking = [HeadRef(1, 3), HeadRef(1, 2), HeadRef(0, 0), HeadRef(0, 3)]
    assert topk_budget(ranking, G, 2) == 0.25  # both top heads share (L1, group 1)
    p = retrieval_policy(ranking, G, 0.5)
    assert p.groups.tolist() == [[True, False], [False, True]]
    live = [HeadRef(1, 3), HeadRef(0, 0), HeadRef(0, 3)]  # L1H2 writes nothing: its group comes after live ones
    assert retrieval_policy(ranking, G, 0.5, live).groups.tolist() == [[True, False], [False, True]]
    assert retrieval_policy(ranking, G, 0.75, live).groups.tolist() == [[True, True], [False, True]]
    assert retrieval_policy(ranking, G, 0.75).groups.tolist() == [[True, True], [False, True]]
    assert retrieval_policy(ranking[1:], G, 0.25, live).groups.tolist() == [[True, False], [False, False]]
    assert retrieval_policy(ranking, G, 1.0).groups.all() and not retrieval_policy(ranking, G, 0.0).groups.any()


def test_random_keeps_as_many_groups_and_draws_live_heads():
    live = [HeadRef(0, 0), HeadRef(0, 1)]  # every live head in (L0, group 0)
    for seed in range(5):
        p = random_policy(live, G, 0.25, seed)
        assert p.groups.sum() == 1 and p.groups[0, 0]
    assert random_policy(G.all_heads(), G, 0.5, 1).groups.sum() == 2
    with pytest.raises(VRHError, match="no live head"):
        random_policy([], G, 0.5, 0)


def test_dropped_keeps_sink_text_recent_and_uniform_spreads():
    seq = 40
    image = np.zeros(seq, dtype=bool)
    image[2:30] = True  # 2,3 are sink (<4); 30.. text; recent = the last 8 (32..39)
    p = retrieval_policy([HeadRef(0, 0)], G, 0.25)
    d = dropped(p, image)
    assert not d[0, 0].any() and d[1, 1].sum() == 26 and not d[:, :, :4].any() and not d[:, :, 30:].any()
    assert shared_drop(d).tolist() == [False, True]
    u = dropped(uniform_policy(G, 0.5), image)
    assert (u == u[0, 0]).all() and u[0, 0].sum() == 13 and shared_drop(u).all()
    assert image_kept_fraction(u, image, seq) == 0.5 and image_kept_fraction(d, image, seq) == 0.25
    slot = 2 * 8 * 2  # K and V, head_dim 8, 2 bytes
    assert kv_bytes(d, seq, 8, 2) == (4 * seq - 3 * 26) * slot
    assert kv_bytes(d, seq, 8, 2, physical_only=True) == (4 * seq - 2 * 26) * slot  # layer 0 still holds its slots
    assert evenly_spaced(10, 3).tolist() == [1, 5, 8] and evenly_spaced(5, 0).size == 0
    with pytest.raises(VRHError, match="outside 0..1"):
        uniform_policy(G, 1.5)
