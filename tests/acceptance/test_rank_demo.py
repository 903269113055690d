"""`vrh-lmms rank` end to end on the shipped demo model (in process, a few synthetic queries and the MMDocIR
fixture): the files it writes, its figures recomputed from the recorded ranks, one query's ranks recomputed from a
direct capture, and the refusal to overwrite."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vrh_lmms.base.paths import assets_path

MODEL = assets_path() / "demo_model"
FIXTURE = Path(__file__).parents[1] / "fixtures" / "mmdocir"
pytestmark = pytest.mark.skipif(not (MODEL / "config.json").is_file(), reason="no shipped demo model")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from vrh_lmms.base.synth.demo_spec import DemoSpec
    from vrh_lmms.cli import main
    from vrh_lmms.pipelines.demo.stages import TASK, demo_model_args, synth_config

    tmp = tmp_path_factory.mktemp("rank")
    spec = DemoSpec.load(MODEL)
    margs = demo_model_args(MODEL, spec)
    mp = pytest.MonkeyPatch()
    mp.setenv("VRH_CACHE_DIR", str(tmp / "cache"))
    mp.setenv("VRH_SYNTH_CONFIG", synth_config(spec, 8, 0))
    heads = tmp / "heads.json"
    assert main(["discover", "--model", "vrh_qwen25", "--model_args", margs, "--tasks", TASK, "--gen-kwargs",
                 "max_new_tokens=16", "--output", str(heads), "--limit", "-1"]) == 0
    mp.undo()
    common = ["rank", "--model", "vrh_qwen25", "--model_args", margs, "--heads-file", str(heads), "--k", "3",
              "--random-seeds", "2"]
    assert main([*common, "--data", "synth", "--limit", "6", "--output", str(tmp / "synth")]) == 0
    assert main([*common, "--data", f"mmdocir:{FIXTURE}", "--output", str(tmp / "doc")]) == 0
    return tmp, margs, common


def test_files_and_figures_recompute_from_the_ranks(runs):
    tmp, _, _ = runs
    data = json.loads((tmp / "synth" / "rank.json").read_text())
    assert (tmp / "synth" / "rank.png").stat().st_size > 5_000
    assert "| top-3 |" in (tmp / "synth" / "rank.md").read_text()
    assert data["n_queries"] == 6 and data["candidates"] == 4
    for scoring in ("calibrated", "raw"):
        ranks = {sid: np.array([q["ranks"][scoring][sid] for q in data["queries"]]) for sid in data["head_sets"]}
        block = data["results"][scoring]
        (row,) = block["rows"]
        assert row["topk"]["recall@1"]["mean"] == pytest.approx(np.mean(ranks["top3"] == 1))
        assert row["topk"]["mrr"]["mean"] == pytest.approx(np.mean(1 / ranks["top3"]))
        assert block["all"]["recall@1"]["mean"] == pytest.approx(np.mean(ranks["all"] == 1))
        draws = [ranks[f"random3_s{s}"] for s in range(2)]
        assert row["random"]["recall@1"]["mean"] == pytest.approx(np.mean([d == 1 for d in draws]))
    dead = set(data["dead_heads"])
    assert len(data["head_sets"]["all"]) == 96 - len(dead) and not dead & set(data["head_sets"]["random3_s0"])
    doc = json.loads((tmp / "doc" / "rank.json").read_text())
    assert [q["gold"] for q in doc["queries"]] == [[1], [2], [0, 2], [1]] and doc["n_sets"] == 3


def test_one_querys_ranks_from_a_direct_capture(runs):
    from vrh_lmms.base.heads.geometry import parse_head
    from vrh_lmms.base.synth.demo_spec import EVAL_SCENE_SEED, PROMPT, DemoSpec
    from vrh_lmms.harness import lmms
    from vrh_lmms.runs.discovery.collector import backend_processor
    from vrh_lmms.runs.rank.capture import candidate_mass, checked_spans, multi_image_inputs
    from vrh_lmms.runs.rank.data import synth_set

    tmp, margs, _ = runs
    data = json.loads((tmp / "synth" / "rank.json").read_text())
    q = data["queries"][4]
    sets = synth_set(6, 4, EVAL_SCENE_SEED, 100_000, DemoSpec.load(MODEL).scene_config())
    images = sets.sets[q["set"]].images
    lm = lmms.build_model("vrh_qwen25", margs, batch_size=1)
    proc = backend_processor(lm)

    def mass(text):
        inputs = multi_image_inputs(proc, PROMPT.format(expression=text), images, text_first=True)
        return candidate_mass(lm.model, dict(inputs), checked_spans(proc, inputs))

    m, null = mass(q["text"]), mass("N/A")
    for sid in ("top3", "all"):
        idx = [parse_head(h) for h in data["head_sets"][sid]]
        for scoring, scores in (("calibrated", [(m - null)[h.layer, h.head] for h in idx]),
                                ("raw", [m[h.layer, h.head] for h in idx])):
            s = np.mean(scores, axis=0)
            want = 1 + int(np.sum(np.delete(s, q["gold"]) >= s[q["gold"]].max()))
            assert q["ranks"][scoring][sid] == want


def test_an_earlier_result_is_not_overwritten(runs, capsys):
    from vrh_lmms.cli import main

    tmp, _, common = runs
    before = (tmp / "synth" / "rank.json").read_text()
    assert main([*common, "--data", "synth", "--limit", "6", "--output", str(tmp / "synth")]) == 0  # finished
    assert "already holds this rank run" in " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert main([*common, "--data", "synth", "--limit", "5", "--output", str(tmp / "synth")]) != 0  # another run
    err = capsys.readouterr().err
    assert "(limit differ)" in err and "--force" in err
    assert (tmp / "synth" / "rank.json").read_text() == before
