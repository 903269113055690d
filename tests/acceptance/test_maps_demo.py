"""`vrh-lmms attention-maps` and `vrh-lmms locate` end to end on the shipped demo model (in process, a handful of
held-out scenes): the files they write, and their figures recomputed from what they recorded."""

from __future__ import annotations

import json

import numpy as np
import pytest
from support.demo_runs import demo_heads_on_eval_scenes

from vrh_lmms.base.boxes.geometry import iou
from vrh_lmms.base.paths import assets_path

MODEL = assets_path() / "demo_model"
pytestmark = pytest.mark.skipif(not (MODEL / "config.json").is_file(), reason="no shipped demo model")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from vrh_lmms.cli import main

    tmp = tmp_path_factory.mktemp("maps")
    mp = pytest.MonkeyPatch()
    common, heads = demo_heads_on_eval_scenes(tmp, mp)
    assert main(["attention-maps", *common, "--heads-file", str(heads), "--docs", "0,2", "--k", "3",
                 "--sigma", "0", "--threshold", "0.5", "--output", str(tmp / "maps")]) == 0
    assert main(["locate", *common, "--heads-file", str(heads), "--limit", "6", "--k", "3", "--random-seeds", "2",
                 "--sigma", "0", "--threshold", "0.5", "--output", str(tmp / "locate")]) == 0
    mp.undo()
    return tmp


def test_attention_maps_files(runs):
    from vrh_lmms.base.heads.heads_file import load_heads_file
    from vrh_lmms.runs.maps.grid import CellGrid
    from vrh_lmms.runs.maps.locator import LocatorSettings, locate_box

    data = json.loads((runs / "maps" / "attention_maps.json").read_text())
    assert [d["doc_id"] for d in data["docs"]] == [0, 2]
    assert data["heads"] == [str(h) for h in load_heads_file(runs / "heads.json").ranking[:3]]
    for doc in data["docs"]:
        assert (runs / "maps" / doc["png"]).stat().st_size > 10_000
        g = doc["grid"]
        assert (g["rows"], g["cols"]) == (6, 6) and g["image_size"] == [168, 168]  # 168 px, 28 px per token
        maps = {k: np.array(v) for k, v in doc["maps"].items()}
        # every head attends to the image with mass <= 1; the top-3 map is sharper than the mean of all heads
        assert all(m.shape == (6, 6) and 0 < m.sum() <= 1 + 1e-6 for m in maps.values())
        assert maps["top"].max() / maps["top"].sum() > maps["all"].max() / maps["all"].sum()
        grid = CellGrid(np.array(g["x_edges"]), np.array(g["y_edges"]), np.zeros((0, 2), int), np.zeros(0, int),
                        tuple(g["image_size"]), g["view"])
        located = locate_box(maps["top"], grid, LocatorSettings(sigma=0.0, threshold=0.5))
        assert list(located) == doc["located_box"]


def test_locate_figures_recompute_from_the_records(runs):
    data = json.loads((runs / "locate" / "locate.json").read_text())
    maps = json.loads((runs / "maps" / "attention_maps.json").read_text())
    docs = data["docs"]
    assert [d["doc_id"] for d in docs] == list(range(6)) and data["n_docs"] == 6
    (row,) = data["rows"]
    assert row["answer"]["mean"] == pytest.approx(np.mean([d["correct"] for d in docs]))
    top = data["sets"]["top3"]
    ious = [iou(box, d["gt_box"]) for box, d in zip(top["boxes"], docs, strict=True)]
    np.testing.assert_allclose(ious, top["iou"], atol=1e-5)
    assert row["topk"]["mean"] == pytest.approx(np.mean(np.array(ious) >= 0.5))
    # the two commands locate the same box on the same doc with the same heads and settings
    for entry in maps["docs"]:
        assert top["boxes"][entry["doc_id"]] == entry["located_box"]
        assert docs[entry["doc_id"]]["pred_box"] == entry["pred_box"]
    # random draws: live heads, never the top set; their mean is the mean of the draws' accuracies
    dead = set(data["dead_heads"])
    draws = [s for sid, s in data["sets"].items() if sid.startswith("random3_")]
    assert len(draws) == 2 and row["random"]["draws"] == 2
    for s in draws:
        assert not set(s["heads"]) & (dead | set(top["heads"]))
        assert s["acc50"] == pytest.approx(np.mean(np.array(s["iou"]) >= 0.5))
    assert row["random"]["mean"] == pytest.approx(np.mean([s["acc50"] for s in draws]))


def test_the_report_shows_the_maps_and_the_locator_table(runs, tmp_path):
    """A sweep folder (the documented format, tests/support/sweep_files) with the two map folders beside it."""
    from support.sweep_files import make_docs, sample_line, vrh_block, write_config, write_manifest

    from vrh_lmms.cli import main

    sweep = tmp_path / "sweep"
    docs = make_docs(np.random.default_rng(0), n_images=10)
    sweep.mkdir()
    write_manifest(sweep)
    write_config(sweep, "baseline", vrh_block("baseline", "baseline", 0, None),
                 [sample_line(d, "correct") for d in docs])
    write_config(sweep, "top3", vrh_block("top3", "topk", 3, None), [sample_line(d, "mislocated") for d in docs])
    out = tmp_path / "report"
    assert main(["report", str(sweep), str(runs / "maps"), str(runs / "locate"), "--output", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert "## Attention maps over the image and the locator" in text
    for doc_id in (0, 2):
        name = f"plots/maps_0_map_vrh_synth_grounding_{doc_id}.png"  # the first map folder
        assert f"]({name})" in text
        assert (out / name).read_bytes() == (runs / "maps" / f"map_vrh_synth_grounding_{doc_id}.png").read_bytes()
    row = json.loads((runs / "locate" / "locate.json").read_text())["rows"][0]
    top = row["topk"]
    shown = f"{100 * top['mean']:.1f} [{100 * top['ci_low']:.1f}, {100 * top['ci_high']:.1f}]"
    assert any(line.startswith("| 3 | ") and shown in line for line in text.splitlines())
    report = json.loads((out / "report.json").read_text())
    assert report["maps"]["locate"][0]["rows"] == json.loads((runs / "locate" / "locate.json").read_text())["rows"]
    assert "report.html" in {p.name for p in out.iterdir()}


def test_attention_maps_keep_every_head_for_the_explorer(runs):
    """doc_views/: each doc's thumbnail and every head's map, the maps the three views of attention_maps.json are
    means of (the top-3 view is the mean of those three heads' maps)."""
    from vrh_lmms.runs.maps import doc_views

    data = json.loads((runs / "maps" / "attention_maps.json").read_text())
    folder = runs / "maps" / doc_views.FOLDER
    saved = json.loads((folder / doc_views.MAPS_JSON).read_text())
    assert [d["doc_id"] for d in saved["docs"]] == [0, 2]
    with np.load(folder / doc_views.MAPS_NPZ) as npz:
        for doc, kept in zip(data["docs"], saved["docs"], strict=True):
            grids = npz[kept["key"]].astype(float)
            assert grids.shape == (6, 16, 6, 6)
            top = np.mean([grids[int(h[1:].split("H")[0]), int(h.split("H")[1])] for h in data["heads"]], axis=0)
            np.testing.assert_allclose(top, np.array(doc["maps"]["top"]), atol=2e-3)
            np.testing.assert_allclose(grids.mean(axis=(0, 1)), np.array(doc["maps"]["all"]), atol=2e-3)
            assert (folder / "images" / f"{kept['key']}.png").is_file()
