"""The plumbing around the new scorers: the main view's token grid of multi-view layouts, presets read back from a
saved heads file, and sample efficiency on the Localization Heads cell."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import Geometry, HeadRef
from vrh_lmms.base.heads.heads_file import HeadsFile, load_heads_file, ranking_from_scores, save_heads_file
from vrh_lmms.model.capture.layouts import assemble, main_view_grid
from vrh_lmms.model.capture.tilings import Gap, Grid, spans
from vrh_lmms.runs.discovery.efficiency import sample_efficiency
from vrh_lmms.runs.discovery.localization import ENTROPY, IMAGE_SUM, frequency


def test_main_view_grid_of_a_base_plus_anyres_layout():
    """LLaVA-NeXT-like: a 3 x 2 `base` view, then a 4 x 4 `anyres` view with a newline token per row."""
    w, h = 90, 60
    blocks = [Grid("base", spans(3, 30.0), spans(2, 30.0)), Gap("separator"),
              Grid("anyres", spans(4, 22.5), spans(4, 15.0), newline=True)]
    n = 6 + 1 + 4 * 5
    tmap = assemble(blocks, torch.arange(100, 100 + n), (w, h))
    grid = main_view_grid(tmap)
    assert grid.shape == (2, 3)
    # the base view's tokens come first, row-major: their positions are 100..105
    assert tmap.positions[grid].tolist() == [[100, 101, 102], [103, 104, 105]]
    cells = tmap.cells[grid]
    assert cells[1, 2].tolist() == [60.0, 30.0, 90.0, 60.0]


def test_main_view_grid_prefers_the_thumbnail_and_refuses_ambiguous_views():
    tiles = [Grid("tile", spans(2, 20.0, 40.0 * i), spans(2, 20.0)) for i in range(2)]
    tmap = assemble([*tiles, Grid("thumbnail", spans(2, 40.0), spans(2, 20.0))], torch.arange(12), (80, 40))
    assert tmap.positions[main_view_grid(tmap)].tolist() == [[8, 9], [10, 11]]
    only_tiles = assemble(tiles, torch.arange(8), (80, 40))  # one view: its tiles form one 2 x 4 grid
    assert only_tiles.positions[main_view_grid(only_tiles)].tolist() == [[0, 1, 4, 5], [2, 3, 6, 7]]
    two = assemble([Grid("hd", spans(2, 40.0), spans(2, 20.0)), Grid("local", spans(2, 40.0), spans(2, 20.0))],
                   torch.arange(8), (80, 40))
    with pytest.raises(VRHError, match="no main view"):
        main_view_grid(two)


def test_presets_read_back_from_a_saved_heads_file(tmp_path):
    g = Geometry(2, 3, 3, 4)
    rng = np.random.default_rng(0)
    cells = {name: rng.random((2, 3)) for name in ("in,sum,mean", "out,sum,mean")}
    block = {name: {"scores": s.tolist(), "ranking": [str(h) for h in ranking_from_scores(s)]}
             for name, s in cells.items()}
    hf = HeadsFile(model={"id": "m"}, geometry=g, scores=cells["out,sum,mean"],
                   ranking=ranking_from_scores(cells["out,sum,mean"]), cells=block,
                   extra={"presets": {"qrhead": "in,sum,mean", "vrh": "out,sum,mean"}})
    save_heads_file(hf, tmp_path / "h.json")
    back = load_heads_file(tmp_path / "h.json")
    assert back.cell_ranking("qrhead") == ranking_from_scores(cells["in,sum,mean"]) == back.cell_ranking("in,sum,mean")
    assert back.cell_name("vrh") == "out,sum,mean"
    with pytest.raises(VRHError, match="no scoring cell or preset 'vera'; it has: in,sum,mean, out,sum,mean, qrhead"):
        back.cell_ranking("vera")
    assert isinstance(back.cell_ranking("qrhead")[0], HeadRef)


def test_sample_efficiency_on_the_localization_cell():
    rng = np.random.default_rng(3)
    entropy = rng.random((12, 3, 4))
    entropy[:, 0] = np.inf  # layer 0 never a candidate
    image = rng.random((12, 3, 4))
    samples = [{ENTROPY: e, IMAGE_SUM: s} for e, s in zip(entropy, image, strict=True)]
    rows, full = sample_efficiency(samples, "localization_heads", k=2, ns=(3,), resamples=10, freq_top_k=2)
    scores = frequency(entropy, image, 2)
    best = sorted(((-scores[l, h], l, h) for l in range(3) for h in range(4)))[:2]
    assert full == {(l, h) for _, l, h in best} and [r.n for r in rows] == [3, 12]
