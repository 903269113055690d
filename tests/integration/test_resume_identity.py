"""A resume checks everything its answers depend on: a discovery resumed on other data, or a sweep resumed under
another box convention, is refused in one line before the model loads (both used to finish with rc 0, mixing two
data sets into one heads file, or two conventions into one drop); the report refuses a group read under two
conventions."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import Geometry
from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file
from vrh_lmms.base.heads.plan import plan_configurations
from vrh_lmms.cli import main
from vrh_lmms.harness import lmms
from vrh_lmms.runs.discovery.run import DiscoverySpec, run_discovery, sidecars
from vrh_lmms.runs.sweep.run import SweepSpec, run_sweep

torch.set_num_threads(1)
PIXELS = 224 * 224
TASK = "vrh_synth_grounding"


def _args(tiny) -> str:
    return f"pretrained={tiny},dtype=float32,min_pixels={PIXELS},max_pixels={PIXELS}"


@pytest.fixture
def lm(tiny_qwen25, vrh_env):
    vrh_env.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 3, "seed": 4}))
    return lmms.build_model("vrh_qwen25", _args(tiny_qwen25))


def _refuse_loads(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the check")

    monkeypatch.setattr(lmms, "build_model", refuse)


def _other_scenes(folder):
    """Other synthetic scenes as local files in the hub schema (what `vrh-lmms synth` writes)."""
    import datasets

    from vrh_lmms.base.synth.layouts import hub_rows
    from vrh_lmms.base.synth.scenes import generate_scenes

    folder.mkdir()
    rows = hub_rows(generate_scenes(3, seed=11))
    datasets.Dataset.from_list(rows).cast_column("image", datasets.Image()).to_parquet(str(folder / "test.parquet"))
    return folder


def test_a_discovery_resumed_on_other_data_is_refused(tiny_qwen25, tmp_path, lm, vrh_env, monkeypatch):
    out = tmp_path / "heads.json"
    spec = DiscoverySpec(model="vrh_qwen25", model_args=_args(tiny_qwen25), tasks=[TASK], output=str(out), limit=2,
                         gen_kwargs="max_new_tokens=6")
    assert run_discovery(spec, lm=lm) == out
    out.unlink()  # as if the run stopped after its parts: the next run resumes them
    vrh_env.setenv("VRH_SYNTH_DATA", str(_other_scenes(tmp_path / "other")))
    _refuse_loads(monkeypatch)
    with pytest.raises(VRHError, match="different discovery \\(data, sources differ\\)") as err:
        run_discovery(spec)
    assert "\n" not in str(err.value)
    identity = json.loads((sidecars(out)["parts"] / "identity.json").read_text())
    assert "VRH_SYNTH_DATA" not in json.dumps(identity)  # the parts folder is untouched


def test_a_sweep_resumed_under_another_box_convention_is_refused(tiny_qwen25, tmp_path, lm, vrh_env, monkeypatch):
    scores = np.random.default_rng(1).random((2, 4))
    heads = save_heads_file(HeadsFile({"id": "tiny", "family": "qwen2_5_vl"}, Geometry(2, 4, 2, 16), scores,
                                      ranking_from_scores(scores)), tmp_path / "heads.json")
    spec = SweepSpec(model="vrh_qwen25", model_args=_args(tiny_qwen25), tasks=[TASK], heads_file=str(heads), limit=2,
                     gen_kwargs="max_new_tokens=6", configurations=plan_configurations([1], 0, False, ["zero"]))
    out = tmp_path / "sweep"
    run_sweep(spec, out, lm=lm, progress=False)
    vrh_env.setenv("VRH_BOX_CONVENTION", "generic")
    _refuse_loads(monkeypatch)
    with pytest.raises(VRHError, match="different sweep \\(data differ\\)"):
        run_sweep(spec, out, progress=False)
    vrh_env.delenv("VRH_BOX_CONVENTION")
    run_sweep(spec, out, lm=lm, progress=False)  # the same convention resumes (nothing left to do, nothing loads)


def _line(doc_id: int, convention: str, correct: bool) -> dict:
    return {"doc_id": doc_id, "input": "Locate it.", "vrh_record": {
        "kind": "grounding", "image_id": f"img{doc_id}", "pred_box": None, "gt_box": [0, 0, 1, 1], "iou": 0.0,
        "correct": correct, "status": "correct" if correct else "mislocated", "n_boxes": 1,
        "convention": convention, "image_size": [10, 10], "raw": "x", "expression": "it"}}


def _config(root, config_id: str, kind: str, k, lines) -> None:
    folder = root / "configs" / config_id
    folder.mkdir(parents=True)
    (folder / "samples_vrh_refcoco_testA.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    vrh = {"schema": 1, "family": "qwen2_5_vl", "pretrained": "org/Tiny", "geometry": {},
           "ablation": {"spec": config_id, "heads": [], "mode": "none" if kind == "baseline" else "zero",
                        "seed": None, "method": "hook", "heads_file": {"path": "h.json", "sha256": "x",
                                                                       "model": "org/Tiny"}},
           "config": {"id": config_id, "kind": kind, "k": k, "seed": None}}
    (folder / "results.json").write_text(json.dumps({"results": {}, "vrh": vrh}))


@pytest.mark.parametrize("top_convention, rc", [("qwen2_5_vl", 0), ("generic", 2)])
def test_the_report_refuses_a_group_read_under_two_box_conventions(top_convention, rc, tmp_path, capsys):
    root = tmp_path / "sweep"
    _config(root, "baseline", "baseline", 0, [_line(i, "qwen2_5_vl", i % 5 != 0) for i in range(40)])
    _config(root, "top5", "topk", 5, [_line(i, top_convention, i % 2 == 0) for i in range(40)])
    assert main(["report", str(root), "--output", str(tmp_path / "report"), "--no-plots"]) == rc
    if rc:
        err = capsys.readouterr().err.strip()
        assert "2 box conventions" in err and "generic (top5" in err and "qwen2_5_vl (baseline" in err
        assert len(err.splitlines()) == 1
