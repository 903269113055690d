"""`pretrained=vrh-demo` and the demo tasks: the name expands to the shipped folder with the model args `vrh-lmms demo`
uses, the demo's heads ship with it (and win over an ambiguous registry), the demo tasks' docs are the scenes the
demo's VRH_SYNTH_CONFIG gives, and an unreachable hub is one line in seconds."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import registry
from vrh_lmms.base.paths import tasks_path
from vrh_lmms.base.pretrained import check_hub_reachable, demo_folder, named_model_args


def test_vrh_demo_expands_to_the_demo_model_args():
    from vrh_lmms.base.synth.demo_spec import DemoSpec
    from vrh_lmms.harness.preload import parse_model_args
    from vrh_lmms.pipelines.demo.stages import demo_model_args

    folder = demo_folder()
    expected = parse_model_args(demo_model_args(folder, DemoSpec.load(folder)))  # what `vrh-lmms demo` loads it with
    assert named_model_args({"pretrained": "vrh-demo"}) == expected
    assert named_model_args({"pretrained": "vrh-demo", "dtype": "bfloat16", "heads": "top5"}) == {
        **expected, "dtype": "bfloat16", "heads": "top5"}
    assert named_model_args({"pretrained": "Org/Model"}) == {"pretrained": "Org/Model"}
    with pytest.raises(VRHError, match="--model vrh_qwen25"):
        named_model_args({"pretrained": "vrh-demo"}, "qwen3_vl")


def _register(tmp_path, monkeypatch, checkpoint: str, tasks: list[str]) -> dict[str, str]:
    monkeypatch.setenv(registry.ENV, str(tmp_path / "registry.json"))
    files = {}
    for task in tasks:
        path = tmp_path / f"{task}.json"
        path.write_text("{}")
        registry.register(checkpoint, [task], path)
        files[task] = str(path.resolve())
    return files


def test_demo_heads_are_shipped_and_resolve_an_ambiguous_registry(tmp_path, monkeypatch):
    folder = str(demo_folder())
    shipped = str(demo_folder() / registry.SHIPPED_HEADS)
    monkeypatch.setenv(registry.ENV, str(tmp_path / "empty.json"))
    assert str(registry.lookup(folder)) == shipped  # no registry entry at all
    # after `vrh-lmms demo`: heads registered for two tasks
    files = _register(tmp_path, monkeypatch, folder, ["vrh_synth_grounding", "vrh_synth_text_needle"])
    assert str(registry.lookup(folder)) == shipped
    assert str(registry.lookup(folder, evaluated=("vrh_demo_grounding",))) == shipped
    assert str(registry.lookup(folder, evaluated=("vrh_synth_grounding",))) == files["vrh_synth_grounding"]
    assert str(registry.lookup(folder, "vrh_synth_text_needle")) == files["vrh_synth_text_needle"]


def test_several_registered_tasks_of_another_model_are_one_line(tmp_path, monkeypatch, tiny_qwen25):
    files = _register(tmp_path, monkeypatch, str(tiny_qwen25), ["task_a", "task_b"])
    with pytest.raises(VRHError, match=r"several tasks \(task_a, task_b\); choose one with heads_task=TASK"):
        registry.lookup(str(tiny_qwen25))
    assert str(registry.lookup(str(tiny_qwen25), evaluated=("task_b", "other"))) == files["task_b"]


def test_demo_tasks_hold_the_demo_scenes(vrh_env, placeholder):
    from vrh_lmms.base.synth.demo_spec import DISCOVERY_START, EVAL_START, N_DISCOVERY, N_EVAL, DemoSpec
    from vrh_lmms.pipelines.demo.stages import synth_config
    from vrh_lmms.tasks.common import demo_scenes, grounding_data

    spec = DemoSpec.load(demo_folder())
    for task, n, start in (("vrh_demo_grounding", N_EVAL, EVAL_START),
                           ("vrh_demo_discovery", N_DISCOVERY, DISCOVERY_START)):
        vrh_env.setenv("VRH_SYNTH_CONFIG", synth_config(spec, n, start))  # how `vrh-lmms demo` chooses them
        demo_docs = grounding_data.vrh_synth_grounding(placeholder())
        vrh_env.delenv("VRH_SYNTH_CONFIG")
        ours = getattr(demo_scenes, task)(placeholder())
        assert len(ours) == n
        for key in ("expression", "gt_box", "image_id", "question_id"):
            assert ours[key] == demo_docs[key], key
        assert [im.tobytes() for im in ours[:3]["image"]] == [im.tobytes() for im in demo_docs[:3]["image"]]


def test_unreachable_hub_is_one_line_in_seconds(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("VRH_HUB_PROBE_TIMEOUT", "2")
    from vrh_lmms.base import pretrained

    pretrained._hub_answers.cache_clear()
    start = time.monotonic()
    with pytest.raises(VRHError) as err:
        check_hub_reachable("Org/Not-Cached", given=False)
    assert time.monotonic() - start < 5
    text = str(err.value)
    assert "\n" not in text and text.startswith("pretrained=Org/Not-Cached (the backend's default")
    assert "did not answer within 2 s" in text and "pretrained=vrh-demo" in text
    # the hint names the task the demo model reads (lmms-eval's refcoco would retry the hub for two minutes)
    task = re.search(r"pretrained=vrh-demo for the shipped demo model with --tasks (\w+)", text).group(1)
    assert f"task: {task}\n" in (Path(tasks_path()) / "synth" / f"{task}.yaml").read_text()
    pretrained._hub_answers.cache_clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(VRHError, match=r"^pretrained=Org/Default \(the backend's default: no pretrained= was given\) "
                                       r"is not in the local hub cache and HF_HUB_OFFLINE"):
        check_hub_reachable("Org/Default", given=False)
    check_hub_reachable("Org/Named")  # offline, a named checkpoint's own load fails at once, in one line
    check_hub_reachable(str(demo_folder()))  # a folder needs no hub
    check_hub_reachable("vrh-demo")
