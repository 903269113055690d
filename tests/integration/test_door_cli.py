"""Bad input at the door, through the real command lines in subprocesses: one stderr line, exit code 2, no output
folder, and no model loaded (the checkpoint path does not exist, so a load would have failed with another message)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import offline_env

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent
MISSING = "/nonexistent/checkpoint"


def _run(tmp_path: Path, *cmd: str) -> subprocess.CompletedProcess:
    env = offline_env(VRH_CACHE_DIR=str(tmp_path / "cache"), VRH_HEADS_REGISTRY=str(tmp_path / "registry.json"))
    return subprocess.run(list(cmd), capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path, check=False)


def _error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, proc.stderr[-3000:]
    return errors[0]


@pytest.mark.parametrize("bad, named", [("heads_fil=x.json", "model arg heads_fil='x.json' is not one that "
                                                             "vrh_qwen25 takes (did you mean 'heads_file'"),
                                        ("heads=topp3", "bad head spec token 'topp3'")])
def test_lmms_eval_refuses_a_bad_model_arg_before_the_checkpoint(tmp_path, bad, named):
    from vrh_lmms.base.paths import tasks_path

    out = tmp_path / "out"
    proc = _run(tmp_path, str(BIN / "lmms-eval"), "--model", "vrh_qwen25", "--model_args",
                f"pretrained={MISSING},{bad}", "--tasks", "vrh_synth_grounding", "--include_path", str(tasks_path()),
                "--limit", "1", "--output_path", str(out))
    line = _error_line(proc)
    assert line.startswith("vrh-lmms: error: ") and named in line and MISSING not in line
    assert not out.exists()


def test_sweep_refuses_an_unknown_model_arg_before_its_folder(tmp_path):
    out = tmp_path / "sweep"
    proc = _run(tmp_path, str(BIN / "vrh-lmms"), "sweep", "--model", "vrh_qwen25", "--model_args",
                f"pretrained={MISSING},max_pixel=100", "--tasks", "vrh_synth_grounding", "--k", "2",
                "--random-seeds", "1", "--output", str(out))
    assert proc.stderr.strip().count("\n") == 0, proc.stderr[-3000:]
    line = _error_line(proc)
    assert line.startswith("vrh-lmms: error: model arg max_pixel=") and "did you mean 'max_pixels'" in line
    assert not out.exists()


def test_compare_heads_refuses_a_binary_heads_file(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"schema": "vrh-heads/1", "model": {"id": "m"},
                                "geometry": {"layers": 1, "heads": 2, "kv_heads": 1, "head_dim": 4},
                                "scores": [[0.2, 0.1]], "ranking": ["L0H0", "L0H1"]}))
    binary = tmp_path / "compare.png"  # a plot given where a heads file belongs
    binary.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    out = tmp_path / "cmp"
    proc = _run(tmp_path, str(BIN / "vrh-lmms"), "compare-heads", str(good), str(binary), "--output", str(out))
    assert proc.stderr.strip().count("\n") == 0, proc.stderr[-3000:]
    assert _error_line(proc) == f"vrh-lmms: error: heads file {binary} is not valid JSON: it is not UTF-8 text " \
                                "(a binary file?)"
    assert not out.exists()
