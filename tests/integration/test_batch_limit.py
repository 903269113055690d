"""A wrapper whose backend takes one doc per call says so (`vrh_max_batch_size`), and a larger `--batch-size` is
refused in one line before anything is written or loaded: lmms-eval's llava_hf backend asserted it only in its
first `generate_until`, after the model load and the folder claim."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file
from vrh_lmms.base.heads.plan import plan_configurations
from vrh_lmms.cli import main
from vrh_lmms.harness import lmms, preload
from vrh_lmms.runs.sweep.run import SweepSpec, run_sweep


@pytest.fixture
def no_model_load(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the check")

    monkeypatch.setattr(lmms, "build_model", refuse)


def test_batch_size_beyond_the_wrappers_limit_is_refused_before_the_load(tiny_or_skip, vrh_env, tmp_path,
                                                                          no_model_load, capsys):
    vrh_env.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 2, "seed": 1}))
    ckpt = tiny_or_skip("llava_next")
    geometry = preload.plan_geometry(preload.ModelPlan("vrh_llava_next", {"pretrained": str(ckpt)})).geometry
    scores = np.random.default_rng(0).random((geometry.layers, geometry.heads))
    heads = save_heads_file(HeadsFile({"id": str(ckpt), "family": "llava_next"}, geometry, scores,
                                      ranking_from_scores(scores)), tmp_path / "heads.json")
    spec = SweepSpec("vrh_llava_next", f"pretrained={ckpt},dtype=float32", ["vrh_synth_grounding"], str(heads),
                     plan_configurations([1], 0, False, ["zero"], random=False), batch_size=2)
    with pytest.raises(VRHError, match=r"^--batch-size 2: vrh_llava_next takes at most 1 doc per call; "
                                       r"use --batch-size 1$"):
        run_sweep(spec, tmp_path / "sweep", progress=False)
    assert not (tmp_path / "sweep").exists(), "refused before the folder is claimed"

    out = tmp_path / "cli"
    capsys.readouterr()
    assert main(["sweep", "--model", "vrh_llava_next", "--model_args", f"pretrained={ckpt}", "--tasks",
                 "vrh_synth_grounding", "--heads-file", str(heads), "--k", "1", "--no-random", "--batch-size", "2",
                 "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--batch-size 2: vrh_llava_next takes at most 1 doc per call" in err
    assert not out.exists()


def test_wrappers_declare_their_limits():
    """The wrappers whose lmms-eval backends refuse batches (llava_hf, internvl_hf, internvl2, internvl3) and our
    own one-doc backend (magma) declare a limit; the batching ones declare none."""
    assert preload.batch_limit(preload.model_class("vrh_llava_next")) == 1
    assert preload.batch_limit(preload.model_class("vrh_internvl")) == 1
    assert preload.batch_limit(preload.model_class("vrh_qwen25")) is None
    preload.check_batch_size("vrh_qwen25", preload.model_class("vrh_qwen25"), 8)
