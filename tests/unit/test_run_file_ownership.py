"""Files a user wrote are not replaced: a run file vrh-lmms did not write is refused before anything loads (unless
--force), and the heads registry never replaces a JSON file that is not a registry."""

from __future__ import annotations

import argparse
import json

import pytest

from vrh_lmms.base import runfile
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import registry
from vrh_lmms.cli import main

SWEEP = ["sweep", "--model", "vrh_qwen25", "--model_args", "pretrained=/nowhere/model", "--tasks", "vrh_no_such_task"]
USER_TEXT = "# my notes for this sweep\ncommand: sweep\nargs:\n  k: 1,5\n"


@pytest.mark.parametrize("command, target", [("sweep", "out/run.yaml"), ("discover", "out/heads.run.yaml")])
def test_user_run_file_is_refused_before_anything_loads(command, target, tmp_path, capsys):
    path = tmp_path / target
    path.parent.mkdir()
    path.write_text(USER_TEXT)
    output = tmp_path / ("out" if command == "sweep" else "out/heads.json")
    argv = [command, *SWEEP[1:], "--output", str(output)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"vrh-lmms: error: {path} was not written by vrh-lmms (its first line is not '# vrh-lmms run "
                   f"file') and a finished run would replace it; move it away, choose another --output, or pass "
                   f"--force")
    assert path.read_text() == USER_TEXT
    # with --force the run goes on (to the next check: the unknown task), and so it does beside a run file of ours
    assert main(argv + ["--force"]) == 2
    assert "vrh_no_such_task" in capsys.readouterr().err
    parser = argparse.ArgumentParser()
    parser.add_argument("--output")
    runfile.write(command, argparse.Namespace(output=str(output)), parser, path)
    assert runfile.is_ours(path)
    assert main(argv) == 2
    assert "vrh_no_such_task" in capsys.readouterr().err


def test_registry_refuses_to_replace_a_foreign_json(tmp_path, monkeypatch):
    other = tmp_path / "settings.json"
    other.write_text(json.dumps({"theme": "dark", "entries": []}))
    monkeypatch.setenv(registry.ENV, str(other))
    heads = tmp_path / "heads.json"
    heads.write_text("{}")
    with pytest.raises(VRHError) as err:
        registry.register("org/model", ["task"], heads)
    assert str(other) in str(err.value) and "not a heads registry" in str(err.value) and "\n" not in str(err.value)
    assert json.loads(other.read_text()) == {"theme": "dark", "entries": []}
    # a registry of ours is read and extended
    mine = tmp_path / "registry.json"
    monkeypatch.setenv(registry.ENV, str(mine))
    registry.register("org/model", ["task"], heads)
    registry.register("org/model", ["other"], heads)
    assert [e["task"] for e in json.loads(mine.read_text())["entries"]] == ["task", "other"]
    assert registry.lookup("org/model", "other") == heads.resolve()
