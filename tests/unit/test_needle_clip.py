"""`vrh_synth_needle_clip` docs: the written mp4 holds the needle scene exactly in the doc's evidence seconds, the
haystack never draws the needle shape, `scene` overrides reach every scene, and a bad config is one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vrh_lmms.tasks.common import needle_clip as nc
from vrh_lmms.tasks.common.sources import SourceError


def config(monkeypatch, **cfg):
    monkeypatch.setenv(nc.CONFIG_ENV, json.dumps(cfg))
    return nc.clip_config()


def test_evidence_seconds_are_the_needle_frames_of_the_written_clip(monkeypatch, tmp_path):
    import decord

    scene = {"colours": ["red", "green", "blue"], "shapes": ["circle", "square", "diamond"], "grid_cell": 28}
    cfg = config(monkeypatch, n=3, seed=2, scenes=5, frames_per_scene=3, fps=6, size=112, needle_shape="diamond",
                 scene=scene)
    for i in range(3):
        doc = nc.make_doc(i, cfg, tmp_path)
        frames, at, colour = nc.clip_frames(i, cfg)
        assert doc["vrh_target"] == colour in scene["colours"] and doc["vrh_needle_scene"] == at
        assert doc["vrh_prompt"] == "What colour is the diamond ?"
        reader = decord.VideoReader(doc["vrh_videos"][0])
        assert (len(reader), reader.get_avg_fps()) == (15, 6.0)
        t0, t1 = doc["vrh_evidence"]["seconds"]
        inside = [f for f in range(len(reader)) if t0 - 1e-9 <= f / 6 <= t1 + 1e-9]
        assert inside == list(range(3 * at, 3 * at + 3))
        decoded = reader.get_batch(list(range(15))).asnumpy().astype(float)
        needle = frames[3 * at].astype(float)
        close = [f for f in range(15) if np.abs(decoded[f] - needle).mean() < 2]
        assert close == inside  # lossless enough to tell the needle scene from every other frame


def test_haystack_never_draws_the_needle_shape(monkeypatch):
    from vrh_lmms.base.synth import scenes as S

    drawn = []
    real = S.generate_scene

    def spy(scene_id, seed=0, cfg=None):
        s = real(scene_id, seed, cfg)
        drawn.append([o.shape for o in s.objects])
        return s

    monkeypatch.setattr(nc, "generate_scene", spy)  # the name the clip builder calls
    cfg = config(monkeypatch, n=1, scenes=8, size=112)
    _, at, _ = nc.clip_frames(0, cfg)
    assert drawn[at] == ["ring"]
    assert all("ring" not in shapes for k, shapes in enumerate(drawn) if k != at)


@pytest.mark.parametrize("cfg,message", [
    ({"fps": 0}, "VRH_CLIP_CONFIG: fps must be positive, got 0"),
    ({"scenes_n": 3}, "VRH_CLIP_CONFIG: unknown key(s) scenes_n"),
    ({"needle_shape": "ring", "scene": {"shapes": ["circle", "square"]}},
     "VRH_CLIP_CONFIG: needle_shape 'ring' is not one of circle, square"),
    ({"scene": {"image_size": 64}}, "VRH_CLIP_CONFIG: scene must map SceneConfig settings"),
])
def test_bad_config_is_one_line(monkeypatch, cfg, message):
    with pytest.raises(SourceError) as err:
        config(monkeypatch, **cfg)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
