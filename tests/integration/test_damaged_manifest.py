"""A sweep folder whose manifest (sweep.json) is damaged or missing: the sweep refuses it in one line naming the
file and the way out (--force), and --force discards it with the sweep's files; `vrh-lmms report` never calls such a
folder complete. (Before: a damaged sweep.json was named as a file vrh-lmms did not write, --force or not, and the
report said `complete: true` for a damaged or a missing one.)"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from support.sweep_files import TASK, make_docs, sample_line, vrh_block, write_config

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import Geometry
from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file
from vrh_lmms.base.heads.plan import plan_configurations
from vrh_lmms.cli import main
from vrh_lmms.runs.runner import Runner
from vrh_lmms.runs.sweep.checks import sweep_job
from vrh_lmms.runs.sweep.run import SweepSpec, describe_configurations, manifest_fields

CONFIGS = plan_configurations([2], random_seeds=2, layer_matched=False, modes=["zero"])
DAMAGES = {"truncated": b'{"identity": {"model": ', "not UTF-8": b"\xff\xfe{}", "empty": b"", "a list": b"[]",
           "another object": b'{"note": 1}'}


def _finished_sweep(root: Path) -> dict:
    """The folder of a finished sweep (its files as `vrh-lmms sweep` writes them); returns its identity."""
    rng = np.random.default_rng(3)
    docs = make_docs(rng, n_images=20, sizes=(1, 3))
    spec = SweepSpec(model="vrh_qwen25", model_args="pretrained=org/Tiny-VLM-2B", tasks=[TASK],
                     heads_file="heads/tiny.json", configurations=CONFIGS)
    root.mkdir()
    for cfg in CONFIGS:
        p = 0.8 if cfg.kind == "baseline" else 0.5
        lines = [sample_line(d, "correct" if rng.random() < p else "mislocated") for d in docs]
        write_config(root, cfg.id, vrh_block(cfg.id, cfg.kind, cfg.k or None, cfg.seed), lines)
    identity = spec.identity("0" * 64)
    runner = Runner(sweep_job(root, identity))
    describe_configurations(runner.job, spec)
    runner.job.fields = lambda: manifest_fields(spec, time.time())
    runner.done = {c.id for c in CONFIGS}
    runner.write_manifest()
    return identity


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_manifest_is_refused_naming_force_and_force_discards_it(damage, tmp_path):
    root = tmp_path / "sweep"
    identity = _finished_sweep(root)
    (root / "sweep.json").write_bytes(DAMAGES[damage])
    with pytest.raises(VRHError, match=r"holds a sweep whose sweep\.json cannot be read \(.+\), so what it ran is "
                                       r"unknown; choose another --output or pass --force to discard it$"):
        Runner(sweep_job(root, identity)).inspect()
    assert (root / "sweep.json").read_bytes() == DAMAGES[damage] and (root / "configs" / "baseline").is_dir()

    runner = Runner(sweep_job(root, identity), force=True)
    runner.inspect()
    runner.claim()
    assert not (root / "configs").exists() or not any((root / "configs").iterdir()), "the sweep's files discarded"
    assert json.loads((root / "sweep.json").read_text())["identity"] == identity


def test_a_damaged_identity_of_a_one_result_run_is_refused_naming_force(tmp_path):
    """The rule is the runner's, so every command's manifest has it: here a one-result run's identity.json."""
    from vrh_lmms.runs.runner import IDENTITY, result_job, result_layout

    out = tmp_path / "locate"
    out.mkdir()
    (out / "locate.json").write_text("{}")
    (out / IDENTITY).write_bytes(b'{"command": ')
    job = result_job(out, result_layout(None, "locate.json"), "locate.json", {"command": "locate", "k": 1},
                     "locate run")
    with pytest.raises(VRHError, match=r"identity\.json cannot be read \(not JSON: .*--force to discard it$"):
        Runner(job).inspect()
    runner = Runner(job, force=True)
    runner.inspect()
    runner.claim()
    assert json.loads((out / IDENTITY).read_text())["command"] == "locate" and not (out / "locate.json").exists()


def test_a_damaged_manifest_beside_a_file_we_did_not_write_is_still_refused(tmp_path):
    root = tmp_path / "sweep"
    identity = _finished_sweep(root)
    (root / "sweep.json").write_bytes(b"{")
    (root / "notes.txt").write_text("mine")
    for force in (False, True):
        with pytest.raises(VRHError, match=r"1 item\(s\) that vrh-lmms did not write \(notes\.txt\)"):
            Runner(sweep_job(root, identity), force=force).inspect()
    assert (root / "sweep.json").read_bytes() == b"{" and (root / "notes.txt").is_file()


def test_a_missing_manifest_is_refused_naming_force_and_force_replaces_it(tmp_path):
    root = tmp_path / "sweep"
    identity = _finished_sweep(root)
    (root / "sweep.json").unlink()
    with pytest.raises(VRHError, match=r"\(no sweep\.json: .*\) with 4 finished .*--force to discard them$"):
        Runner(sweep_job(root, identity)).inspect()
    runner = Runner(sweep_job(root, identity), force=True)
    runner.inspect()
    runner.claim()
    assert json.loads((root / "sweep.json").read_text())["identity"] == identity
    assert not any((root / "configs").glob("*/results.json"))


def test_the_sweep_command_names_the_damaged_manifest_in_one_line(tiny_qwen25, tmp_path, capsys, monkeypatch):
    from vrh_lmms.harness import lmms

    monkeypatch.setattr(lmms, "build_model", lambda *a, **k: pytest.fail("the model was loaded"))
    root = tmp_path / "sweep"
    _finished_sweep(root)
    (root / "sweep.json").write_bytes(b'{"identity": ')
    geometry = Geometry(2, 4, 2, 16)  # the tiny Qwen2.5-VL of conftest
    scores = np.random.default_rng(1).random((geometry.layers, geometry.heads))
    heads = save_heads_file(HeadsFile({"id": "tiny", "family": "qwen2_5_vl"}, geometry, scores,
                                      ranking_from_scores(scores)), tmp_path / "heads.json")
    capsys.readouterr()
    assert main(["sweep", "--model", "vrh_qwen25", "--model_args", f"pretrained={tiny_qwen25}", "--tasks",
                 "vrh_synth_grounding", "--heads-file", str(heads), "--k", "1", "--no-random",
                 "--output", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "sweep.json cannot be read (not JSON: " in err and "--force" in err, err


@pytest.mark.parametrize("damage", ["truncated", "not UTF-8", "a list"])
def test_the_report_never_calls_a_sweep_with_an_unreadable_manifest_complete(damage, tmp_path, capsys):
    root = tmp_path / "sweep"
    _finished_sweep(root)
    (root / "sweep.json").write_bytes(DAMAGES[damage])
    out = tmp_path / "report"
    capsys.readouterr()
    assert main(["report", str(root), "--output", str(out), "--no-plots"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{root}: its sweep.json cannot be read (" in err and "--allow-incomplete" in err, err
    assert not out.exists()

    assert main(["report", str(root), "--output", str(out), "--no-plots", "--allow-incomplete"]) == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["complete"] is False and rep["pending"][0]["folder"] == str(root)
    assert rep["pending"][0]["unreadable"]
    assert (out / "report.md").read_text().startswith("**Incomplete:** 1 sweep folder(s)")


def test_the_report_of_a_sweep_folder_without_its_manifest_does_not_say_complete(tmp_path):
    """Without sweep.json whether the sweep finished is unknown: the report goes on (hand-written sweep folders are
    read as before) but says `complete: null`, with a warning naming the folder."""
    root = tmp_path / "sweep"
    _finished_sweep(root)
    (root / "sweep.json").unlink()
    out = tmp_path / "report"
    assert main(["report", str(root), "--output", str(out), "--no-plots"]) == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["complete"] is None and rep["pending"] == []
    assert any("no sweep.json" in w and "whether its sweep finished is unknown" in w for w in rep["warnings"])
