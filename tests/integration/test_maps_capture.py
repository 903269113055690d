"""Attention maps equal eager attention: per head, the answer rows' probabilities on each image token, averaged by
hand from `output_attentions=True` (attn_implementation="eager"), on tiny real-class models; and the PNG."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from oracles.intervention_refs import eager_attentions

from vrh_lmms.base.heads.geometry import HeadRef
from vrh_lmms.model.capture.extras import layout_extras
from vrh_lmms.model.capture.layouts import image_token_map
from vrh_lmms.model.tiny.inputs import load_tiny, processor_inputs
from vrh_lmms.model.tiny.registry import TINY_FACTORIES
from vrh_lmms.runs.maps.capture import image_attention
from vrh_lmms.runs.maps.grid import cell_grid
from vrh_lmms.runs.maps.views import view_maps

torch.set_num_threads(1)
SIZE = 112


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen3_vl"])
def one_sample(request, tiny_checkpoints):
    if request.param not in TINY_FACTORIES:
        pytest.skip(f"no tiny {request.param} factory")
    model, processor = load_tiny(tiny_checkpoints(request.param))
    batch = processor_inputs(processor, n=1, image_sizes=[SIZE])
    ids = batch["input_ids"][0]
    tmap = image_token_map(request.param, ids, (SIZE, SIZE), layout_extras(request.param, processor, batch, 0))
    return model, batch, tmap


def test_maps_equal_eager_attention(one_sample):
    model, batch, tmap = one_sample
    t = batch["input_ids"].shape[1]
    rows = [t - 4, t - 2, t - 1]  # the prompt's last rows stand in for answer rows: any rows after the image
    got = image_attention(model, dict(batch), rows, tmap)
    attn = eager_attentions(model, batch).float()[0]  # (layers, heads, T, T)
    by_hand = np.zeros(got.shape)
    for li in range(attn.shape[0]):
        for hi in range(attn.shape[1]):
            for ti, pos in enumerate(tmap.positions.tolist()):
                by_hand[li, hi, ti] = np.mean([float(attn[li, hi, r, pos]) for r in rows])
    assert got.shape == (attn.shape[0], attn.shape[1], len(tmap.positions))
    np.testing.assert_allclose(got, by_hand, rtol=0, atol=2e-6)
    assert got.std() > 1e-4, "a map that is flat everywhere tests nothing"


def test_the_png_is_written_and_shows_the_maps(one_sample, tmp_path):
    import matplotlib.image as mpimg

    from vrh_lmms.runs.maps.figure import maps_figure

    model, batch, tmap = one_sample
    t = batch["input_ids"].shape[1]
    per_head = image_attention(model, dict(batch), [t - 1], tmap)
    grid = cell_grid(tmap.cells.numpy(), tmap.view, (SIZE, SIZE))
    maps = view_maps(per_head, [HeadRef(0, 0), HeadRef(1, 1)])
    image = np.zeros((SIZE, SIZE, 3), dtype=np.uint8)
    panels = [(name, grid.to_grid(values)) for name, values in maps.items()]
    path = maps_figure(image, grid, panels, (10, 10, 40, 40), (20, 20, 60, 60), tmp_path / "a.png", title="t",
                       located=(0, 0, 28, 28))
    assert path.stat().st_size > 10_000
    pixels = mpimg.imread(path)[..., :3]
    assert pixels.std() > 0.05 and len(np.unique(pixels.reshape(-1, 3), axis=0)) > 100
    # the same figure with flat maps is another picture: the maps are what is drawn
    flat = [(name, np.ones(grid.shape)) for name, _ in panels]
    other = maps_figure(image, grid, flat, (10, 10, 40, 40), (20, 20, 60, 60), tmp_path / "b.png", title="t",
                        located=(0, 0, 28, 28))
    again = mpimg.imread(other)[..., :3]
    assert again.shape != pixels.shape or not np.array_equal(again, pixels)


def test_rows_before_the_image_are_refused(one_sample):
    from vrh_lmms.base.errors import VRHError

    model, batch, tmap = one_sample
    first = int(tmap.positions.min())
    with pytest.raises(VRHError, match="come before the image"):
        image_attention(model, dict(batch), [0, first - 1], tmap)
