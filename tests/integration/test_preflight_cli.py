"""Bad checkpoint paths under the plain lmms-eval command line: one line naming the value, no traceback, and no
attempt to reach the hub for a value that is a local path (issue 16: 64 and 107 lines, the second after 70 s)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import offline_env

pytestmark = pytest.mark.slow
LMMS_EVAL = str(Path(sys.executable).with_name("lmms-eval"))


@pytest.mark.parametrize("value, says", [
    ("/nonexistent", "pretrained=/nonexistent: no such folder"),
    ("runs/tiny-qwn", "pretrained=runs/tiny-qwn: no such folder (runs/ exists here, but holds no tiny-qwn)"),
])
def test_bad_pretrained_is_one_line_under_lmms_eval(value, says, tmp_path):
    from vrh_lmms.base.paths import tasks_path

    (tmp_path / "runs").mkdir()
    env = offline_env(VRH_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("HF_HUB_OFFLINE")  # a local-looking path must not be tried on the hub even when it is reachable
    env.pop("TRANSFORMERS_OFFLINE")
    proc = subprocess.run([LMMS_EVAL, "--model", "vrh_qwen25", "--model_args", f"pretrained={value}", "--tasks",
                           "vrh_synth_grounding", "--include_path", str(tasks_path()), "--output_path",
                           str(tmp_path / "out")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert errors == [f"vrh-lmms: error: {says}; expected a checkpoint folder (with config.json) or a hub id such "
                      f"as Qwen/Qwen2.5-VL-7B-Instruct"], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "huggingface.co" not in proc.stderr


def test_vrh_lmms_eval_names_the_vrh_models(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "vrh_lmms", "eval", "--model", "vrh_nosuch", "--tasks",
                           "vrh_synth_grounding"], cwd=tmp_path, env=offline_env(), capture_output=True, text=True,
                          timeout=600)
    lines = [line for line in proc.stderr.splitlines() if "vrh-lmms: error" in line]
    assert proc.returncode == 2 and len(lines) == 1 and "'vrh_nosuch'" in lines[0] and "vrh_qwen25" in lines[0]
    assert "Traceback" not in proc.stderr
