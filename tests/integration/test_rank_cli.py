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
    args = ["rank", "--model", "vrh_qwen25", "--model_args", "pretrained=nowhere", "--heads-file", "missing.json",
            "--output", "out", *extra]
    assert main(args) != 0
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out").exists()
