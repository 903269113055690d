"""`vrh-lmms replicate` prints its plan before it starts: the generations of each stage (counted from lmms-eval's own
task objects and the sweep's own configuration plan) and, after a short calibration on the loaded model, their
time. Checked on the demo model's protocol at small settings against counts made by hand."""

from __future__ import annotations

import pytest

from vrh_lmms.pipelines.replicate.budget import StagePlan, plan_text
from vrh_lmms.pipelines.replicate.plan import demo_spec
from vrh_lmms.pipelines.replicate.run import Context, print_plan

N_CELLS = 6  # the paper's other scoring cells masked beside the primary one (fig2 + fig3 + fig8b + a8)


def test_plan_counts_and_calibration_on_the_demo(tmp_path, capsys):
    spec = demo_spec(random_seeds=2, n_detect=16, n_eval=24)
    spec.ks = [1, 5]
    spec.vqa_k = 5
    ctx = Context(spec, tmp_path / "run", progress=False)
    plan = print_plan(ctx, calibrate_docs=2)
    assert plan["docs"]["vrh_synth_grounding"] == 24
    # baseline + per k: top-k, 2 random, 2 random-outside, 6 other cells' top-k
    grounding = (1 + 2 * (1 + 2 + 2 + N_CELLS)) * 24
    vqa = (1 + (1 + 2 + 2)) * plan["docs"]["vrh_synth_vqa"]
    assert plan["generations"] == {"discovery": 16, "grounding": grounding, "vqa": vqa, "maps": len(spec.map_docs)}
    assert plan["seconds_per_generation"] > 0
    err = capsys.readouterr().err
    assert f"{'grounding':<10} {grounding:>10,} (23 configurations x 24 docs" in err
    total = 16 + grounding + vqa + len(spec.map_docs)
    controls = 2 * (2 + 2) * 24 + 4 * plan["docs"]["vrh_synth_vqa"]
    assert f"{'total':<10} {total:>10,}" in err and f"control draws: {controls:,}" in err


def test_plan_text_durations():
    text = plan_text([StagePlan("grounding", 136, 8611, 100), StagePlan("discovery", 0, 0, 0, 200)], 0.05)
    assert "1,171,096 (136 configurations x 8611 docs, ~16.3 h)" in text
    assert "200 (200 docs, ~10 s)" in text and "control draws: 861,100 (74%)" in text
    assert "calibrated" not in plan_text([StagePlan("maps", 0, 0, 0, 4)], None)


@pytest.mark.parametrize("bad", ["-1"])
def test_calibrate_docs_refused_when_negative(bad, capsys, tmp_path):
    from vrh_lmms.cli import main

    out = tmp_path / "not" / "there" / "x"
    assert main(["replicate", "--demo", "--calibrate-docs", bad, "--output", str(out)]) == 2
    assert not (tmp_path / "not").exists()  # a refused run leaves no folder behind, not even its lock
    assert "--calibrate-docs must be >= 0" in capsys.readouterr().err


def test_plan_with_control_docs_counts_the_subset(tmp_path, capsys):
    """`replicate --control-docs N`: each control evaluates the image subset the sweep will draw (counted here from
    the docs' image ids with image_subsample), the others every doc; the plan shows the controls' generations on the
    subset and on all docs."""
    from vrh_lmms.base.stats.subsample import image_subsample
    from vrh_lmms.harness import lmms

    spec = demo_spec(random_seeds=2, n_detect=16, n_eval=24)
    spec.ks, spec.vqa_k, spec.control_docs = [1, 5], 5, 10
    ctx = Context(spec, tmp_path / "run", progress=False)
    plan = print_plan(ctx, calibrate_docs=0)
    with ctx.docs("eval"):
        tm = lmms.task_manager(spec.model, tasks=["vrh_synth_grounding", "vrh_synth_vqa"])
        sub = {t: image_subsample([str(d["image_id"]) for _, _, d in lmms.eval_docs(tm, [t])], 10, seed=0).size
               for t in ("vrh_synth_grounding", "vrh_synth_vqa")}
    assert plan["control_docs"] == sub and sub["vrh_synth_grounding"] < 24
    g, v = plan["docs"]["vrh_synth_grounding"], plan["docs"]["vrh_synth_vqa"]
    grounding = (1 + 2 * (1 + N_CELLS)) * g + 2 * (2 + 2) * sub["vrh_synth_grounding"]
    vqa = 2 * v + 4 * sub["vrh_synth_vqa"]
    assert plan["generations"] == {"discovery": 16, "grounding": grounding, "vqa": vqa, "maps": len(spec.map_docs)}
    assert plan["control_generations_on_all_docs"]["grounding"] == 2 * (2 + 2) * g
    err = capsys.readouterr().err
    controls = 8 * sub["vrh_synth_grounding"] + 4 * sub["vrh_synth_vqa"]
    on_all = 8 * g + 4 * v
    assert f"({1 + 2 * (1 + N_CELLS)} configurations x {g} docs + 8 controls x {sub['vrh_synth_grounding']} docs" in err
    assert f"control draws: {controls:,}" in err and f"{on_all:,} on all docs" in err
    assert "control_docs" not in demo_spec().to_dict()  # replications of earlier versions still resume


def test_replicate_passes_control_docs_to_its_sweeps(monkeypatch, tmp_path):
    from vrh_lmms.pipelines.replicate import run as replicate_run

    seen = []  # patched where replicate calls them
    monkeypatch.setattr(replicate_run, "run_sweep", lambda spec, output, **kw: seen.append(spec) or output)
    monkeypatch.setattr(replicate_run, "choose_pack", lambda *a: 1)
    spec = demo_spec(random_seeds=2, n_detect=16, n_eval=24)
    spec.control_docs = 7

    class Ctx:
        def __init__(self):
            self.spec, self.progress = spec, False

        def lm(self, which="model"):
            return type("LM", (), {})()

        def docs(self, which):
            import contextlib

            return contextlib.nullcontext()

    replicate_run._sweep(Ctx(), "model", ["vrh_synth_grounding"], tmp_path / "h.json", [1], tmp_path / "s")
    assert seen[0].control_docs == 7
