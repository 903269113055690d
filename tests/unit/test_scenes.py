"""Synthetic scenes: determinism, unique referents, conjunctive distractors, grid placement."""

from __future__ import annotations

import numpy as np
import pytest

from vrh_lmms.base.synth.scenes import SceneConfig, generate_scene


def test_scene_is_a_pure_function_of_seed_and_id():
    a, b, c = generate_scene(3, 1), generate_scene(3, 1), generate_scene(4, 1)
    assert a.objects == b.objects and np.array_equal(np.asarray(a.image), np.asarray(b.image))
    assert a.objects != c.objects


def test_referent_is_unique_and_distractors_share_an_attribute():
    shared = 0
    for i in range(50):
        s = generate_scene(i, 0, SceneConfig(conjunctive_share=1.0))
        t = s.target_object
        assert s.expression == f"the {t.colour} {t.shape}"
        others = [o for k, o in enumerate(s.objects) if k != s.target]
        assert all((o.colour, o.shape) != (t.colour, t.shape) for o in others)
        shared += all(o.colour == t.colour or o.shape == t.shape for o in others)
    assert shared == 50


def test_grid_placement_fills_distinct_cells():
    cfg = SceneConfig(image_size=112, grid_cell=28, min_objects=5, max_objects=5)
    for i in range(20):
        s = generate_scene(i, 2, cfg)
        cells = {(o.bbox[0], o.bbox[1]) for o in s.objects}
        assert len(cells) == 5
        assert all(o.bbox[2] == o.bbox[3] == 28 and o.bbox[0] % 28 == 0 and o.bbox[1] % 28 == 0 for o in s.objects)
    with pytest.raises(ValueError, match="do not fit"):
        generate_scene(0, 0, SceneConfig(image_size=56, grid_cell=28, min_objects=5, max_objects=5))
