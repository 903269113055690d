"""Sweeps: plan ids, one model load for every configuration, kill + resume equals an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import offline_env

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import Geometry
from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file
from vrh_lmms.base.heads.plan import plan_configurations

PIXELS = 224 * 224


def test_plan_ids_and_validation():
    ids = [c.id for c in plan_configurations([5, 1], 2, True, ["zero", "mean"])]
    assert ids[:8] == ["baseline", "top1", "random1_s0", "random1_s1", "layer_matched1_s0", "layer_matched1_s1",
                       "top5", "random5_s0"]
    assert "top1_mean" in ids and "layer_matched5_s1_mean" in ids and len(ids) == len(set(ids)) == 1 + 2 * 2 * 5
    with pytest.raises(VRHError, match="--ablation 'half'"):
        plan_configurations([1], 1, False, ["half"])
    with pytest.raises(VRHError, match="positive"):
        plan_configurations([0], 1, False, ["zero"])


@pytest.fixture(scope="module")
def sweep_inputs(tiny_qwen25, tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    scores = np.random.default_rng(1).random((2, 4))
    heads = root / "heads.json"
    save_heads_file(HeadsFile({"id": str(tiny_qwen25), "family": "qwen2_5_vl"}, Geometry(2, 4, 2, 16), scores,
                              ranking_from_scores(scores)), heads)
    env = offline_env(VRH_CACHE_DIR=str(root / "cache"), VRH_SYNTH_CONFIG=json.dumps({"n": 3, "seed": 4}))
    return root, heads, env


def sweep_cmd(tiny, heads, out):
    return [sys.executable, "-m", "vrh_lmms", "sweep", "--model", "vrh_qwen25",
            "--model_args", f"pretrained={tiny},dtype=float32,min_pixels={PIXELS},max_pixels={PIXELS}",
            "--tasks", "vrh_synth_grounding", "--heads-file", str(heads), "--k", "1,2", "--random-seeds", "2",
            "--layer-matched", "--limit", "3", "--gen-kwargs", "max_new_tokens=8", "--output", str(out)]


def config_contents(out: Path) -> dict[str, tuple]:
    """What must be identical between runs: metrics, vrh block, and every sample line."""
    contents = {}
    for folder in sorted((out / "configs").iterdir()):
        results = json.loads((folder / "results.json").read_text())
        samples = (folder / "samples_vrh_synth_grounding.jsonl").read_text().splitlines()
        lines = [{k: v for k, v in json.loads(line).items() if k != "token_counts"} for line in samples]
        contents[folder.name] = (results["results"], results["vrh"], lines)
    return contents


@pytest.mark.slow
def test_killed_sweep_resumes_to_the_same_files(tiny_qwen25, sweep_inputs):
    root, heads, env = sweep_inputs
    full, resumed = root / "full", root / "resumed"
    alone = ["--pack", "1"]  # each configuration generates on its own, so the kill lands between configurations
    subprocess.run(sweep_cmd(tiny_qwen25, heads, full) + alone, env=env, check=True, capture_output=True, timeout=600)
    proc = subprocess.Popen(sweep_cmd(tiny_qwen25, heads, resumed) + alone, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline:
        done = list((resumed / "configs").glob("*/results.json")) if (resumed / "configs").exists() else []
        if len(done) >= 3 or proc.poll() is not None:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = {p.parent.name for p in (resumed / "configs").glob("*/results.json")}
    assert 3 <= len(done) < 11, f"kill came too late or too early: {sorted(done)}"
    partial = resumed / "configs" / "top2"  # a configuration folder left without results.json is redone
    if "top2" not in done:
        partial.mkdir(exist_ok=True)
        (partial / "samples_vrh_synth_grounding.jsonl").write_text("garbage\n")
    manifest = json.loads((resumed / "sweep.json").read_text())
    assert {c["id"] for c in manifest["configurations"] if c["status"] == "done"} <= done
    finished = subprocess.run(sweep_cmd(tiny_qwen25, heads, resumed) + alone, env=env, capture_output=True, text=True,
                              timeout=600)
    assert finished.returncode == 0, finished.stderr[-2000:]
    a, b = config_contents(full), config_contents(resumed)
    assert sorted(a) == sorted(b) and len(a) == 11
    for cid in a:
        assert a[cid] == b[cid], cid
    manifest = json.loads((resumed / "sweep.json").read_text())
    assert all(c["status"] == "done" for c in manifest["configurations"])
    # Recorded head sets are the resolved ones.
    assert b["top2"][1]["ablation"]["heads"] == [str(h) for h in sorted(ranking_from_scores(
        np.random.default_rng(1).random((2, 4)))[:2])]
    # A different sweep into the same folder is refused, not mixed in.
    other = sweep_cmd(tiny_qwen25, heads, resumed) + alone
    other[other.index("--limit") + 1] = "2"
    refused = subprocess.run(other, env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "different sweep" in refused.stderr


def finished_in(out: Path) -> list[str]:
    """The configurations the sweep's manifest records as done."""
    manifest = json.loads((out / "sweep.json").read_text())
    return [c["id"] for c in manifest["configurations"] if c["status"] == "done"]


@pytest.mark.slow
def test_two_sweeps_never_mix_and_an_interrupted_one_is_not_reported_as_whole(tiny_qwen25, sweep_inputs):
    """A second sweep with another heads file into a folder a sweep is writing is refused naming the running one;
    once that one is killed mid-way the second is still refused (its heads file differs), and `vrh-lmms report`
    refuses the interrupted folder unless --allow-incomplete, which then says so."""
    root, heads, env = sweep_inputs
    out = root / "shared"
    other = root / "other_heads.json"
    scores = np.random.default_rng(2).random((2, 4))
    save_heads_file(HeadsFile({"id": str(tiny_qwen25), "family": "qwen2_5_vl"}, Geometry(2, 4, 2, 16), scores,
                              ranking_from_scores(scores)), other)
    # long enough to outlast the second command's start-up: about 240 configurations, each generating on its own (51 ran
    # out within a loaded machine's start-up of the second command, which then found every configuration done)
    slow = ["--random-seeds", "60", "--pack", "1"]
    first = subprocess.Popen(sweep_cmd(tiny_qwen25, heads, out) + slow, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 300
        while not (out / "sweep.json").is_file() and time.time() < deadline and first.poll() is None:
            time.sleep(0.05)
        second = subprocess.run(sweep_cmd(tiny_qwen25, other, out), env=env, capture_output=True, text=True,
                                timeout=300)
        assert second.returncode == 2
        assert f"is in use by pid {first.pid} (vrh-lmms sweep, started" in second.stderr.strip().splitlines()[-1]
        while time.time() < deadline and first.poll() is None and not finished_in(out):
            time.sleep(0.05)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    done = finished_in(out)  # the manifest's (a results.json written just before the kill may not be in it yet)
    manifest = json.loads((out / "sweep.json").read_text())
    assert 1 <= len(done) < len(manifest["configurations"]), done
    assert manifest["heads_file"] == str(heads)
    again = subprocess.run(sweep_cmd(tiny_qwen25, other, out), env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "heads_file_sha256 differ" in again.stderr
    assert json.loads((out / "sweep.json").read_text()) == manifest  # nothing of the second sweep got in
    report = [sys.executable, "-m", "vrh_lmms", "report", str(out), "--output", str(root / "report"), "--no-plots"]
    refused = subprocess.run(report, env=env, capture_output=True, text=True, timeout=300)
    pending = [c["id"] for c in manifest["configurations"] if c["id"] not in done]
    assert refused.returncode == 2 and f"{len(pending)} configuration(s) pending ({pending[0]}" in refused.stderr
    flagged = subprocess.run(report + ["--allow-incomplete"], env=env, capture_output=True, text=True, timeout=300)
    assert flagged.returncode == 0, flagged.stderr[-2000:]
    rep = json.loads((root / "report" / "report.json").read_text())
    assert rep["complete"] is False and rep["pending"][0]["configurations"] == pending
    assert (root / "report" / "report.md").read_text().startswith("**Incomplete:**")
