"""`vrh-lmms rank` refuses bad input with one line naming it, before any model loads."""

from __future__ import annotations

import pytest

from vrh_lmms.cli import main


@pytest.mark.parametrize("extra, says", [
    (["--data", "pages"], "--data 'pages'"),
    (["--data", "synth", "--k", "0"], "--k '0'"),
    (["--data", "synth", "--random-seeds", "-1"], "--random-seeds"),
    (["--data", "synth", "--heads-file", "missing.json"], "missing.json"),
])
def test_bad_input_is_one_line(extra, says, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # the heads file is checked after the model args (vrh_lmms.runs.preflight): for its case they name a folder
    # with a config.json, which is all the model args' check reads
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    pretrained = "ckpt" if says == "missing.json" else "nowhere"
    args = ["rank", "--model", "vrh_qwen25", "--model_args", f"pretrained={pretrained}", "--heads-file",
            "missing.json", "--output", "out", *extra]
    assert main(args) != 0
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out").exists()
