"""`vrh-lmms replicate --demo`: the paper's protocol on the demo model into one folder and one summary.

Small settings (16 detection scenes, 24 evaluation scenes, k = 1 and 5, two draws). With a twin of the demo model
as the partner (same weights, another folder), each transferred top-k must score exactly what the model's own
top-k scores, which checks the transfer plumbing end to end. A rerun resumes (nothing is evaluated again), other
settings in the same folder are refused, and a file vrh-lmms did not write is never touched."""

from __future__ import annotations

import json
import shutil

import pytest

from vrh_lmms.cli import main
from vrh_lmms.pipelines.demo.pipeline import demo_model_path

SMALL = ["--n-detect", "16", "--limit", "24", "--k", "1,5", "--vqa-k", "5", "--random-seeds", "2"]


@pytest.fixture(scope="module")
def replication(tmp_path_factory):
    twin = tmp_path_factory.mktemp("partner") / "demo_twin"
    shutil.copytree(demo_model_path(), twin)
    out = tmp_path_factory.mktemp("replicate") / "run"
    assert main(["replicate", "--demo", *SMALL, "--partner", str(twin), "--output", str(out)]) == 0
    return out, twin


def _acc(folder, config, task="vrh_synth_grounding"):
    return json.loads((folder / "configs" / config / "results.json").read_text())["results"][task]["acc50,none"]


def test_every_stage_writes_its_artefact_and_the_summary_leads_with_verdicts(replication):
    out, _ = replication
    manifest = json.loads((out / "replicate.json").read_text())
    assert list(manifest["stages"]) == ["discovery", "grounding", "vqa", "efficiency", "distribution",
                                          "maps", "transfer", "report"]
    assert all(s["status"] == "done" for s in manifest["stages"].values())
    for path in ("heads.json", "efficiency/efficiency.png", "report/report.html", "partner/heads.json",
                 "maps/map_vrh_synth_grounding_0.png", "maps/attention_maps.json"):
        assert (out / path).is_file(), path
    text = (out / "replicate.md").read_text()
    assert text.index("## What was found") < text.index("## This run beside the paper")
    assert "Masking the top-5 heads" in text and "Cross-task (vrh_synth_vqa)" in text
    assert "the paper has no figures for this model" in text and "| top-5 VRHs |" in text
    sweep = json.loads((out / "sweeps" / "grounding" / "sweep.json").read_text())
    kinds = {c["kind"] for c in sweep["configurations"]}
    # the plan printed before the run counted what the grounding sweep then generated
    docs = len((out / "sweeps" / "grounding" / "configs" / "baseline" / "samples_vrh_synth_grounding.jsonl")
               .read_text().splitlines())
    assert manifest["plan"]["generations"]["grounding"] == len(sweep["configurations"]) * docs == 23 * 24
    assert manifest["plan"]["seconds_per_generation"] > 0
    assert kinds == {"baseline", "topk", "random", "random_outside", "scorer_topk"}
    # Figs 2/3/8b and Table A8: every other scoring cell's top-k, compared in the report and the summary
    cells = {c["cell"] for c in sweep["configurations"] if c["kind"] == "scorer_topk"}
    assert cells == {"in,sum,mean", "out,argmax,mean", "out,sum,freq", "localization_heads",
                     "out_random1,sum,mean", "in+out,sum,mean"}
    assert sweep["control_pool"] == "live"  # 54 of the demo's 96 heads write nothing: controls draw live heads
    (block,) = json.loads((out / "report" / "report.json").read_text())["scorers"]
    assert len(block["rows"]) == 1 + len(cells) + 1 and block["ks"] == [1, 5]
    assert "Scorers compared at k = " in text
    figures = text[text.index("## Figures"):text.index("## Files")]
    for path in ("report/plots/scorers_", "distribution/distribution.png", "efficiency/efficiency.png",
                 "compare/compare.png", "maps/map_vrh_synth_grounding_0.png"):
        assert f"]({path}" in figures, path
    assert json.loads((out / "heads.json").read_text())["scoring"]["key_tokens"] == "any"  # the paper's rule


def test_twin_partner_heads_score_exactly_the_models_own(replication):
    out, _ = replication
    own, transferred = out / "sweeps" / "grounding", out / "sweeps" / "transfer_partner_heads_on_model"
    for k in (1, 5):
        assert _acc(transferred, f"top{k}") == _acc(own, f"top{k}")


def test_rerun_resumes_and_other_settings_are_refused(replication, capsys):
    out, twin = replication
    before = (out / "replicate.json").read_text()
    stamp = (out / "sweeps" / "grounding" / "configs" / "top5" / "results.json").stat().st_mtime_ns
    assert main(["replicate", "--demo", *SMALL, "--partner", str(twin), "--output", str(out)]) == 0
    assert (out / "replicate.json").read_text() == before
    assert (out / "sweeps" / "grounding" / "configs" / "top5" / "results.json").stat().st_mtime_ns == stamp
    assert main(["replicate", "--demo", *SMALL[:-1], "3", "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert "holds a different replication" in err and "random_seeds" in err
    (out / "notes.txt").write_text("mine")
    assert main(["replicate", "--demo", *SMALL[:-1], "3", "--output", str(out), "--force"]) == 2
    assert "notes.txt" in capsys.readouterr().err and (out / "notes.txt").read_text() == "mine"
