"""The Python API (docs/api.md): its code block runs as written on the shipped demo model; `ablate` restores weights
and hooks bit for bit on exit and after an exception; `evaluate` gives the acc50 lmms-eval's own command line gives
on the same docs and heads."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import offline_env

import vrh_lmms as vrh
from vrh_lmms.base.paths import tasks_path

ROOT = Path(__file__).resolve().parents[2]
PIXELS = 224 * 224


def api_block() -> str:
    """The first python code block of docs/api.md, as a reader copies it."""
    return re.search(r"```python\n(.*?)```", (ROOT / "docs" / "api.md").read_text(), re.S).group(1)


def _hooks(model: torch.nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("fail", [False, True], ids=["exit", "exception"])
def test_ablate_restores_weights_and_hooks_exactly(tiny_qwen25, vrh_env, fail):
    model = vrh.load(str(tiny_qwen25), dtype="float32", min_pixels=PIXELS, max_pixels=PIXELS)
    assert model.name == "vrh_qwen25"  # inferred from config.json's model_type
    before, hooks = _state(model.hf), _hooks(model.hf)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        intact = model.hf(input_ids=ids).logits
    try:
        with vrh.ablate(model, ["L0H0", "L1H1"]) as headset:
            assert headset.names == ["L0H0", "L1H1"]
            with torch.no_grad():
                ablated = model.hf(input_ids=ids).logits
            changed = any(not torch.equal(v, before[k]) for k, v in model.hf.state_dict().items())
            assert changed or _hooks(model.hf) > hooks
            assert not torch.equal(ablated, intact)
            if fail:
                raise KeyError("inside the block")
    except KeyError:
        assert fail
    after = model.hf.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    assert _hooks(model.hf) == hooks
    with torch.no_grad():
        assert torch.equal(model.hf(input_ids=ids).logits, intact)


@pytest.mark.slow
def test_api_block_runs_as_written_and_evaluate_matches_the_cli(tmp_path, monkeypatch, vrh_env):
    vrh_env.setenv("VRH_HEADS_REGISTRY", str(tmp_path / "registry.json"))
    namespace: dict = {}
    exec(compile(api_block(), "docs/api.md", "exec"), namespace)  # noqa: S102  (the documented block itself)
    heads, r, model = namespace["heads"], namespace["r"], namespace["model"]
    assert len(heads.ranking) == 96 and len(r.samples) == 100
    assert r.heads == [str(h) for h in sorted(heads.top(5).heads)]
    assert 0 <= r.metrics["acc50"] <= 1
    base = vrh.evaluate(model, task="vrh_demo_grounding", limit=100)
    drop = r.drop_vs(base)
    assert drop.points == pytest.approx(100 * (base.metrics["acc50"] - r.metrics["acc50"]))
    assert drop.ci[0] < drop.points < drop.ci[1]
    # the same docs and heads through lmms-eval's own command line
    saved = heads.save(tmp_path / "heads.json")
    ours = vrh.evaluate(model, task="vrh_demo_grounding", heads=heads.top(5), limit=30)
    out = tmp_path / "cli"
    cmd = [str(Path(sys.executable).with_name("lmms-eval")), "--model", "vrh_qwen25", "--model_args",
           f"pretrained=vrh-demo,heads=top5,heads_file={saved}", "--tasks", "vrh_demo_grounding",
           "--include_path", str(tasks_path()), "--limit", "30", "--output_path", str(out), "--log_samples"]
    proc = subprocess.run(cmd, env=offline_env(VRH_HEADS_REGISTRY=str(tmp_path / "registry.json")),
                          capture_output=True, text=True, timeout=900, check=False)
    results = sorted(out.rglob("*_results.json"))
    assert results, (proc.stdout + proc.stderr)[-3000:]
    cli = json.loads(results[-1].read_text())
    assert cli["vrh"]["ablation"]["heads"] == ours.heads
    assert ours.metrics["acc50"] == cli["results"]["vrh_demo_grounding"]["acc50,none"]
    samples = [json.loads(line) for p in out.rglob("*vrh_demo_grounding*.jsonl") for line in p.read_text().splitlines()]
    assert {s["doc_id"]: s["acc50"] for s in samples} == {s["doc_id"]: s["acc50"] for s in ours.samples}
