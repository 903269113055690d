"""Heads that write nothing (o_proj columns all zero) are found from the weights, recorded, and kept out of control
draws; a control that live heads cannot fill is reported as unavailable, never padded with dead heads.

The shipped demo model has 54 such heads (pruned in training). Real checkpoints have none, and then nothing changes:
`--control-pool all` and the live pool draw the same heads as before pools existed.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from vrh_lmms.base.heads import Geometry, HeadRef
from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file
from vrh_lmms.model.backbone import dead_heads, locate_decoder

PIXELS = 224 * 224
ZEROED = (HeadRef(0, 0), HeadRef(0, 2), HeadRef(0, 3), HeadRef(1, 1))  # layer 0 keeps only H1 alive


def _by_column_loop(decoder) -> list[HeadRef]:
    """The direct computation: a head is dead when every weight of its o_proj input slice is zero."""
    g = decoder.geometry
    return [HeadRef(l, h) for l, proj in enumerate(decoder.out_projs) for h in range(g.heads)
            if int(torch.count_nonzero(proj.weight[:, h * g.head_dim:(h + 1) * g.head_dim])) == 0]


def test_the_shipped_demo_models_dead_heads_are_its_zero_o_proj_columns():
    from transformers import AutoModelForImageTextToText

    from vrh_lmms.base.paths import assets_path

    model = AutoModelForImageTextToText.from_pretrained(str(assets_path() / "demo_model"))
    decoder = locate_decoder(model)
    dead = dead_heads(decoder)
    assert list(dead) == _by_column_loop(decoder) and len(dead) == 54
    per_layer = {layer: sum(1 for h in dead if h.layer == layer) for layer in range(6)}
    assert per_layer == {0: 0, 1: 0, 2: 12, 3: 15, 4: 13, 5: 14}  # layers 3-5 keep 6 heads, layer 2 four


@pytest.fixture(scope="module")
def pruned_tiny(tiny_qwen25, tmp_path_factory):
    """The tiny Qwen2.5-VL with four heads' o_proj columns zeroed, saved as a checkpoint."""
    from transformers import AutoModelForImageTextToText

    path = tmp_path_factory.mktemp("pruned") / "ckpt"
    shutil.copytree(tiny_qwen25, path)
    model = AutoModelForImageTextToText.from_pretrained(str(path), dtype=torch.float32)
    decoder = locate_decoder(model)
    d = decoder.geometry.head_dim
    with torch.no_grad():
        for h in ZEROED:
            decoder.out_projs[h.layer].weight[:, h.head * d:(h.head + 1) * d] = 0
    model.save_pretrained(str(path))
    return path


def test_a_dead_heads_ablation_changes_nothing(pruned_tiny):
    """Why a draw of dead heads is no control: zeroing them leaves every logit as it was, bit for bit."""
    from transformers import AutoModelForImageTextToText

    from vrh_lmms.base.heads.spec import HeadSet
    from vrh_lmms.model.ablation import Ablator

    model = AutoModelForImageTextToText.from_pretrained(str(pruned_tiny), dtype=torch.float32)
    decoder = locate_decoder(model)
    assert dead_heads(decoder) == ZEROED
    ids = torch.tensor([[1, 5, 9, 13, 2, 7]])
    with torch.no_grad():
        clean = model.model.language_model(input_ids=ids).last_hidden_state
        Ablator(model, decoder, method="hook").apply(HeadSet(ZEROED, "dead", "explicit", 4), mode="zero")
        ablated = model.model.language_model(input_ids=ids).last_hidden_state
    assert torch.equal(clean, ablated)


def test_the_wrapper_records_dead_heads_and_draws_live_controls(pruned_tiny):
    from vrh_lmms.harness import lmms

    args = f"pretrained={pruned_tiny},dtype=float32,min_pixels={PIXELS},max_pixels={PIXELS}"
    live = lmms.build_model("vrh_qwen25", args + ",heads=random4,seed=0")
    record = live.vrh_record()
    assert record["dead_heads"] == [str(h) for h in ZEROED]
    assert record["ablation"]["pool"] == "live" and record["ablation"]["dead_heads"] == []
    assert not set(live.vrh_headset.heads) & set(ZEROED)
    uniform = lmms.build_model("vrh_qwen25", args + ",heads=random4,seed=0,control_pool=all")
    idx = np.random.default_rng(0).choice(8, size=4, replace=False)  # the draw before pools existed
    assert uniform.vrh_headset.heads == tuple(sorted(HeadRef(int(i) // 4, int(i) % 4) for i in idx))
    assert uniform.vrh_record()["ablation"]["dead_heads"] == [str(h) for h in uniform.vrh_headset.heads
                                                             if h in ZEROED]


@pytest.mark.slow
def test_a_sweep_draws_live_controls_reports_unavailable_ones_and_the_report_says_so(pruned_tiny, tmp_path,
                                                                                       vrh_env):
    """top2 = L0H1 (layer 0's one live head) + L1H0: a live layer-matched draw for layer 0 is impossible and is
    reported as unavailable; random draws hold no dead head; uniform draws over all heads run beside them and the
    report counts their dead heads."""
    from vrh_lmms.base.heads.plan import plan_configurations
    from vrh_lmms.report import ReportSettings, build_report
    from vrh_lmms.runs.sweep.run import SweepSpec, run_sweep

    vrh_env.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 2, "seed": 4}))
    scores = np.zeros((2, 4))
    scores[0, 1], scores[1, 0] = 2.0, 1.0
    heads = tmp_path / "heads.json"
    save_heads_file(HeadsFile({"id": str(pruned_tiny), "family": "qwen2_5_vl"}, Geometry(2, 4, 2, 16), scores,
                              ranking_from_scores(scores)), heads)
    configs = plan_configurations([2], 3, True, ["zero"], uniform_random=True)
    spec = SweepSpec(model="vrh_qwen25", model_args=f"pretrained={pruned_tiny},dtype=float32,min_pixels={PIXELS},"
                     f"max_pixels={PIXELS}", tasks=["vrh_synth_grounding"], heads_file=str(heads),
                     configurations=configs, limit=2, gen_kwargs="max_new_tokens=4")
    out = run_sweep(spec, tmp_path / "sweep", progress=False)
    manifest = json.loads((out / "sweep.json").read_text())
    status = {c["id"]: c for c in manifest["configurations"]}
    assert manifest["dead_heads"] == [str(h) for h in ZEROED] and manifest["control_pool"] == "live"
    for s in range(3):
        lm = status[f"layer_matched2_s{s}"]
        assert lm["status"] == "unavailable" and "layer 0" in lm["reason"] and "write nothing" in lm["reason"]
        assert not (out / "configs" / f"layer_matched2_s{s}").exists()
        ablation = json.loads((out / "configs" / f"random2_s{s}" / "results.json").read_text())["vrh"]["ablation"]
        assert ablation["pool"] == "live" and not set(ablation["heads"]) & {str(h) for h in ZEROED}
        uniform = json.loads((out / "configs" / f"random_all2_s{s}" / "results.json").read_text())["vrh"]["ablation"]
        assert uniform["pool"] == "all" and uniform["dead_heads"] == [h for h in uniform["heads"]
                                                                      if h in {str(z) for z in ZEROED}]
    report = build_report([out], tmp_path / "report", ReportSettings(n_resamples=200, plots=False))
    text = (tmp_path / "report" / "report.md").read_text()
    assert "**4 heads write nothing**" in text and "layer_matched2_s0" in text and "could not be drawn" in text
    shares = report["pools"]["dead_shares"]
    rows = {r["kind"]: r for r in next(iter(shares.values()))}
    assert rows["random"]["draws_with_dead"] == 0 and rows["random"]["pools"] == ["live"]
    assert rows["random_all"]["pools"] == ["all"]
    assert "layer_matched" not in rows
