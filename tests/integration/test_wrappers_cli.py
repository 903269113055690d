"""`lmms-eval --model vrh_qwen25 ...` end to end in a subprocess (the real CLI, entry-point registration, task
loading, results writing). lmms-eval exits 0 even when a run fails, so the output files are what is checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import offline_env

pytestmark = pytest.mark.slow
TASK = "vrh_synth_grounding"
LMMS_EVAL = str(Path(sys.executable).with_name("lmms-eval"))
QWEN_PIXELS = "min_pixels=3136,max_pixels=50176"


def _tasks_path() -> str:
    from vrh_lmms.base.paths import tasks_path

    path = tasks_path()
    if not any(path.rglob(f"{TASK}.yaml")):
        pytest.skip(f"task {TASK} is not in {path} yet")
    return str(path)


def _lmms_eval(model_args: str, out: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [LMMS_EVAL, "--model", "vrh_qwen25", "--model_args", model_args, "--tasks", TASK,
           "--include_path", _tasks_path(), "--limit", "2", "--output_path", str(out), *extra]
    env = offline_env(VRH_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, cwd=tmp_path, check=False)


def test_lmms_eval_records_the_ablated_heads(tiny_qwen25, tmp_path):
    out = tmp_path / "out"
    proc = _lmms_eval(f"pretrained={tiny_qwen25},heads=L0H1;L1H0,{QWEN_PIXELS}", out, tmp_path, "--log_samples")
    results = list(out.rglob("*_results.json"))
    assert proc.returncode == 0 and len(results) == 1, proc.stderr[-3000:]
    data = json.loads(results[0].read_text())
    vrh = data["vrh"]
    assert vrh["family"] == "qwen2_5_vl" and vrh["pretrained"] == str(tiny_qwen25)
    assert vrh["ablation"]["heads"] == ["L0H1", "L1H0"] and vrh["ablation"]["mode"] == "zero"
    assert vrh["ablation"]["method"] == "fold" and vrh["config"]["kind"] == "explicit"
    assert TASK in data["results"]
    samples = list(out.rglob(f"*_samples_{TASK}.jsonl"))
    assert len(samples) == 1 and len(samples[0].read_text().splitlines()) == 2


def test_bad_head_spec_is_one_clear_line_and_fails(tiny_qwen25, tmp_path):
    proc = _lmms_eval(f"pretrained={tiny_qwen25},heads=L0H99", tmp_path / "out", tmp_path)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if "vrh-lmms: error:" in line]
    assert len(errors) == 1 and "L0H99" in errors[0] and "H0-H3" in errors[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert not list((tmp_path / "out").rglob("*_results.json"))
