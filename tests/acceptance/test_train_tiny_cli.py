"""`vrh-lmms train-tiny` refuses bad input before it trains anything."""

from __future__ import annotations

from research.demo_model.designs import DESIGNS, LATEST
from vrh_lmms.cli import main


def test_the_default_design_exists():
    assert LATEST in DESIGNS and "demo" not in DESIGNS  # no alias pretending to be the shipped model's recipe


def test_unknown_design_and_bad_backbone_are_named(tmp_path, capfd):
    assert main(["train-tiny", "--out", str(tmp_path / "m"), "--design", "t9"]) == 2
    assert "unknown design 't9'; known: p21" in capfd.readouterr().err  # the shipped design only
    assert main(["train-tiny", "--out", str(tmp_path / "m"), "--design", "p19"]) == 2  # research: research.train
    assert "unknown design 'p19'; known: p21" in capfd.readouterr().err
    assert main(["train-tiny", "--out", str(tmp_path / "m"), "--backbone", str(tmp_path)]) == 2
    assert "holds no model.safetensors" in capfd.readouterr().err
    assert not (tmp_path / "m").exists()


def test_resume_needs_an_unfinished_run(tmp_path, capfd):
    assert main(["train-tiny", "--out", str(tmp_path), "--resume"]) == 2
    assert "holds no unfinished run (no resume_state.pt)" in capfd.readouterr().err


def test_a_kept_state_must_be_an_evaluation_point(tmp_path, capfd):
    """p21 evaluates every 500 joint steps: joint:4750 is no saved state, refused before anything is written."""
    assert main(["train-tiny", "--out", str(tmp_path / "m"), "--design", "p21", "--keep-state-at", "joint:4750"]) == 2
    assert "--keep-state-at: keep state 'joint:4750': states are saved at every 500 steps" in capfd.readouterr().err
    assert main(["train-tiny", "--out", str(tmp_path / "m"), "--keep-state-at", "visual:500"]) == 2
    assert "PHASE one of text0, text1, align, joint" in capfd.readouterr().err
    assert not (tmp_path / "m").exists()
