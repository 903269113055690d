"""The card's literal command, `lmms-eval --model vrh_qwen25 --model_args heads=top20 --tasks refcoco`, on a machine
that cannot reach the hub: it ends within seconds with one line naming the default checkpoint it tried and how to
choose another, after a one-line note that `refcoco` is lmms-eval's own task and the paper's is vrh_refcoco_val."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import offline_env

CARD = ["--model", "vrh_qwen25", "--model_args", "heads=top20", "--tasks", "refcoco"]


@pytest.mark.slow
@pytest.mark.parametrize("offline", [True, False], ids=["offline-variables", "hub-unreachable"])
def test_card_command_ends_in_seconds_with_one_line(offline, tmp_path):
    env = offline_env(HF_HOME=str(tmp_path / "hf"), VRH_HUB_PROBE_TIMEOUT="2")  # an empty hub cache
    if not offline:  # no offline variable: the probe meets a closed port, as a machine without network would
        for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
            env.pop(key)
        env["HF_ENDPOINT"] = "http://127.0.0.1:9"
    start = time.monotonic()
    proc = subprocess.run([str(Path(sys.executable).with_name("lmms-eval")), *CARD], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    elapsed = time.monotonic() - start
    ours = [line for line in proc.stderr.splitlines() if line.startswith("vrh-lmms:")]
    assert len(ours) == 2, proc.stderr[-3000:]
    assert ours[0].startswith("vrh-lmms: note: refcoco is lmms-eval's own task") and "vrh_refcoco_val" in ours[0]
    assert ours[1].startswith("vrh-lmms: error: pretrained=Qwen/Qwen2.5-VL-3B-Instruct (the backend's default: no "
                              "pretrained= was given) is not in the local hub cache")
    assert "pretrained=vrh-demo for the shipped demo model with --tasks vrh_demo_grounding" in ours[1]
    assert "Traceback" not in proc.stderr and "Retrying" not in proc.stderr + proc.stdout
    assert proc.returncode == 2
    assert elapsed < 60, elapsed  # lmms-eval's own start-up (imports, task index) is most of it
