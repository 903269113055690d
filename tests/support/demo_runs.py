"""The shipped demo model, its heads from a discovery on 8 of its discovery scenes, and the environment set to 6
held-out evaluation scenes: what the applications' acceptance tests start from; and `vrh-lmms demo` itself, run as a
user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def demo_heads_on_eval_scenes(tmp: Path, mp: pytest.MonkeyPatch) -> tuple[list[str], Path]:
    """Runs the discovery; returns the common command-line options (model, args, task, generation) and the heads
    file, with VRH_SYNTH_CONFIG left on the held-out scenes (undo `mp` when done)."""
    from vrh_lmms.base.paths import assets_path
    from vrh_lmms.base.synth.demo_spec import DemoSpec
    from vrh_lmms.cli import main
    from vrh_lmms.pipelines.demo.stages import EVAL_START, TASK, demo_model_args, synth_config

    model = assets_path() / "demo_model"
    spec = DemoSpec.load(model)
    mp.setenv("VRH_CACHE_DIR", str(tmp / "cache"))
    common = ["--model", "vrh_qwen25", "--model_args", demo_model_args(model, spec), "--tasks", TASK,
              "--gen-kwargs", "max_new_tokens=16"]
    heads = tmp / "heads.json"
    mp.setenv("VRH_SYNTH_CONFIG", synth_config(spec, 8, 0))  # the demo's discovery scenes
    assert main(["discover", *common, "--output", str(heads), "--limit", "-1"]) == 0
    mp.setenv("VRH_SYNTH_CONFIG", synth_config(spec, 6, EVAL_START))  # held-out scenes
    return common, heads


def run_demo_cli(out: Path, *args: str) -> subprocess.CompletedProcess:
    """`vrh-lmms demo --output OUT [ARGS]` in a subprocess, offline and on one thread (the suite's other xdist worker
    holds the other core); fails the test, with the end of stderr, unless it exits 0."""
    from conftest import offline_env

    proc = subprocess.run([sys.executable, "-m", "vrh_lmms", "demo", "--output", str(out), *args],
                          env=offline_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc
