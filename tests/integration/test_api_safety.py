"""The Python API is as safe as the command line (docs/api.md): `evaluate` / `discover` inside an active `ablate`
block are refused (an ablated model is never recorded as intact); `ablate` blocks exited out of order or entered from
two threads never leave a head ablated; a named output takes the command line's lock and an existing run folder is
refused before anything is generated; `evaluate` leaves the global generators and lmms-eval's tracker wrap as it
found them; a temporary discovery is never registered."""

from __future__ import annotations

import json
import os
import random
import threading

import numpy as np
import pytest
import torch

import vrh_lmms as vrh
from vrh_lmms import api
from vrh_lmms.base import folder_lock
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import registry
from vrh_lmms.harness import lmms
from vrh_lmms.model_wrappers import results_hook

TASK = "vrh_demo_grounding"
HEADS = ["L4H12", "L5H5"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The shipped demo model, loaded once, with no VRH_* setting of the caller's and a registry of its own."""
    from vrh_lmms.base.boxes import context

    tmp = tmp_path_factory.mktemp("api_safety")
    with pytest.MonkeyPatch.context() as mp:
        for key in list(os.environ):
            if key.startswith("VRH_"):
                mp.delenv(key)
        mp.setenv("VRH_CACHE_DIR", str(tmp / "vrh_cache"))
        mp.setenv(registry.ENV, str(tmp / "registry.json"))
        yield vrh.load("vrh-demo")
    context.clear_active()


def _state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.hf.state_dict().items()}


def _same(model, before: dict[str, torch.Tensor]) -> bool:
    after = model.hf.state_dict()
    return after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)


def _hooks(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.hf.modules())


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_evaluate_and_discover_inside_an_ablate_block_are_refused(demo, monkeypatch):
    """Today's main evaluated the ablated model there and recorded it as a baseline with no heads."""
    with vrh.ablate(demo, HEADS):
        with pytest.raises(VRHError) as refused:
            vrh.evaluate(demo, task=TASK, limit=2)
        assert "vrh.evaluate(vrh_demo_grounding): refused" in _one_line(refused)
        assert "vrh.ablate(L4H12, L5H5)" in str(refused.value) and "heads=" in str(refused.value)
        with pytest.raises(VRHError) as refused:
            vrh.discover(demo, task="vrh_demo_discovery", limit=2)
        assert "vrh.discover(vrh_demo_discovery): refused" in _one_line(refused)
    assert api._IN_USE.get(demo.hf) is None  # the block's end frees the model


def test_ablate_blocks_exited_out_of_order_leave_no_head_ablated(demo):
    """Notebook cells: two blocks entered, the first exited first. Today's main left L5H5 zeroed for good."""
    before, hooks = _state(demo), _hooks(demo)
    first, second = vrh.ablate(demo, HEADS), vrh.ablate(demo, ["L5H5", "L1H7"])
    first.__enter__()
    try:
        second.__enter__()
        entered = True
    except VRHError as exc:
        entered = False
        assert "vrh.ablate(L1H7, L5H5): refused, the model is in use by vrh.ablate(L4H12, L5H5)" in str(exc)
        assert "\n" not in str(exc)
    first.__exit__(None, None, None)
    if entered:
        second.__exit__(None, None, None)
    assert _same(demo, before) and _hooks(demo) == hooks
    with vrh.ablate(demo, ["L1H7"]):  # the model is free again
        assert not _same(demo, before)
    assert _same(demo, before)


def test_ablate_from_two_threads_leaves_no_head_ablated(demo):
    before = _state(demo)
    entered, second_done, errors = threading.Event(), threading.Event(), []

    def first() -> None:
        with vrh.ablate(demo, HEADS):
            entered.set()
            second_done.wait(30)  # the second thread tries while this block is active, and exits after this one

    def second() -> None:
        entered.wait(30)
        try:
            block = vrh.ablate(demo, ["L5H5"])
            block.__enter__()
        except VRHError as exc:
            errors.append(str(exc))
            second_done.set()
            return
        second_done.set()
        thread_one.join(30)
        block.__exit__(None, None, None)

    thread_one, thread_two = threading.Thread(target=first), threading.Thread(target=second)
    thread_one.start()
    thread_two.start()
    thread_two.join(60)
    thread_one.join(60)
    assert _same(demo, before)
    assert errors and "in use by vrh.ablate(L4H12, L5H5)" in errors[0]


def _no_generation(*args, **kwargs):
    raise AssertionError("generated before checking its output")


def test_evaluate_into_an_existing_folder_is_refused_before_generating(demo, tmp_path, monkeypatch):
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    monkeypatch.setattr(lmms, "evaluate", _no_generation)
    with pytest.raises(VRHError) as refused:
        vrh.evaluate(demo, task=TASK, limit=2, output=out)
    assert _one_line(refused).startswith(f"{out} exists already")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_a_named_output_takes_the_command_lines_lock(demo, tmp_path, monkeypatch):
    """Today's main took no lock: it wrote into outputs CLI runs held."""
    monkeypatch.setattr(lmms, "evaluate", _no_generation)
    monkeypatch.setattr(api, "run_discovery", _no_generation)
    run, heads = tmp_path / "run", tmp_path / "heads.json"
    with folder_lock.held(run, "vrh-lmms sweep"), folder_lock.held(tmp_path / "heads", "vrh-lmms discover"):
        with pytest.raises(VRHError) as refused:
            vrh.evaluate(demo, task=TASK, limit=2, output=run)
        line = _one_line(refused)
        assert line.startswith(f"{run} is in use by pid {os.getpid()} (vrh-lmms sweep") and "wait=True" in line
        with pytest.raises(VRHError) as refused:
            vrh.discover(demo, task="vrh_demo_discovery", limit=2, output=heads)
        assert _one_line(refused).startswith(f"{heads} is in use by pid {os.getpid()} (vrh-lmms discover")
    assert not run.exists() and not heads.exists()

    seen = {}

    def fake_discovery(spec, lm=None, register=True):
        seen["holder"] = folder_lock.read_holder(folder_lock.lock_path(spec.output))
        seen["register"] = register
        raise VRHError("stop here")

    monkeypatch.setattr(api, "run_discovery", fake_discovery)
    with pytest.raises(VRHError, match="stop here"):
        vrh.discover(demo, task="vrh_demo_discovery", limit=2, output=heads)
    assert seen["holder"]["command"] == "vrh.discover" and seen["register"] is True  # named: registered


def test_evaluate_leaves_the_generators_and_the_tracker_wrap_as_it_found_them(demo):
    """Today's main reseeded Python's, NumPy's and torch's generators (to 0) and re-installed the tracker wrap."""
    from lmms_eval.loggers.evaluation_tracker import EvaluationTracker

    random.seed(123)
    np.random.seed(123)
    torch.manual_seed(123)
    states = random.getstate(), np.random.get_state(), torch.random.get_rng_state()
    results_hook.uninstall()  # as vrh.load leaves it
    method = EvaluationTracker.save_results_aggregated
    result = vrh.evaluate(demo, task=TASK, heads=HEADS, limit=1)
    assert result.heads == sorted(HEADS, key=lambda h: (int(h[1:].split("H")[0]), int(h.split("H")[1])))
    assert random.getstate() == states[0]
    after = np.random.get_state()
    assert after[0] == states[1][0] and np.array_equal(after[1], states[1][1]) and after[2:] == states[1][2:]
    assert torch.equal(torch.random.get_rng_state(), states[2])
    assert results_hook._ORIGINAL is None and EvaluationTracker.save_results_aggregated is method
    assert json.loads((result.folder / "results.json").read_text())["vrh"]["ablation"]["heads"] == result.heads


def test_a_temporary_discovery_is_never_registered(demo, tmp_path, monkeypatch):
    """Today's main registered the temporary heads file: `heads=top5` on vrh-demo then used it, and failed once the
    temporary folder was gone."""
    monkeypatch.setenv(registry.ENV, str(tmp_path / "registry.json"))
    checkpoint = str(demo.lm.vrh_pretrained)  # the demo model's folder, as discovery registers it
    shipped = registry.lookup(checkpoint)
    assert shipped.name == registry.SHIPPED_HEADS
    found = vrh.discover(demo, task="vrh_demo_discovery", limit=2)
    assert found.path.is_file() and len(found.ranking) == 96
    assert not (tmp_path / "registry.json").exists()
    assert registry.lookup(checkpoint) == shipped  # `heads=top5` still means the shipped heads
