"""The shipped demo model by name: `lmms-eval --model vrh_qwen25 --model_args pretrained=vrh-demo,heads=...
--tasks vrh_demo_grounding` reproduces the demo's baseline and its top-5 drop with no discovery run and no registry
entry (the demo model's own heads ship with the package), and needs no VRH_SYNTH_CONFIG."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import offline_env

from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.base.paths import tasks_path
from vrh_lmms.base.pretrained import demo_folder


def _lmms_eval(heads: str, out: Path, tmp_path: Path) -> dict:
    cmd = [str(Path(sys.executable).with_name("lmms-eval")), "--model", "vrh_qwen25", "--model_args",
           f"pretrained=vrh-demo,heads={heads}", "--tasks", "vrh_demo_grounding", "--include_path", str(tasks_path()),
           "--limit", "50", "--output_path", str(out)]
    env = offline_env(VRH_HEADS_REGISTRY=str(tmp_path / "fresh-registry.json"), VRH_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("VRH_SYNTH_CONFIG", None)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    results = sorted(out.rglob("*_results.json"))
    assert results, (proc.stdout + proc.stderr)[-3000:]
    return json.loads(results[-1].read_text())


@pytest.mark.slow
def test_demo_by_name_gives_the_demo_baseline_and_top5_drop(tmp_path):
    base = _lmms_eval("none", tmp_path / "none", tmp_path)
    top5 = _lmms_eval("top5", tmp_path / "top5", tmp_path)
    assert not (tmp_path / "fresh-registry.json").exists()  # nothing was registered: the shipped heads served
    acc_base = base["results"]["vrh_demo_grounding"]["acc50,none"]
    acc_top5 = top5["results"]["vrh_demo_grounding"]["acc50,none"]
    assert base["n-samples"]["vrh_demo_grounding"] == {"original": 100, "effective": 50}  # the demo's evaluation set
    assert acc_base >= 0.80, acc_base
    assert acc_base - acc_top5 >= 0.40, (acc_base, acc_top5)
    shipped = load_heads_file(demo_folder() / "heads.json")
    ablation = top5["vrh"]["ablation"]
    assert ablation["heads"] == [str(h) for h in sorted(shipped.ranking[:5])]
    assert ablation["heads_file"]["path"] == str((demo_folder() / "heads.json").resolve())
    assert base["vrh"]["ablation"]["heads"] == []
