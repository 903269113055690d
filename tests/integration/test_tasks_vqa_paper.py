"""vrh_vqa_paper: each of the seven subsets keeps exactly the rows the paper's Table 3 uses, from fixtures in the
published schemas that also hold rows it must drop (tests/support/vqa_paper_data.py names each schema's source);
VAW's multiple choice reaches the docs as built; the group runs inside lmms-eval and its metrics compute."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import offline_env
from support import vqa_paper_data as data

from vrh_lmms.base.paths import tasks_path
from vrh_lmms.tasks.common import vqa as V
from vrh_lmms.tasks.common import vqa_paper as VP
from vrh_lmms.tasks.common.sources import SourceError
from vrh_lmms.tasks.common.vaw_mc import VAWMCError

TASKS = list(data.KEPT)


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, str]:
    return data.write_all(tmp_path_factory.mktemp("vqa_paper"))


@pytest.fixture
def paper_env(vrh_env, sources):
    for key, value in sources.items():
        vrh_env.setenv(key, value)
    return vrh_env


@pytest.mark.parametrize("task", TASKS)
def test_each_subset_keeps_exactly_the_papers_rows(task, paper_env, placeholder):
    docs = getattr(VP, task)(placeholder())
    assert docs["question_id"] == data.KEPT[task]
    assert docs["vrh_key"] == [f"{task}#{i}" for i in range(len(docs))]  # re-keyed after the filter
    assert VP.PAPER_SIZES[task] in (6309, 670, 266, 2638, 1500, 491, 1000)


def test_a_subset_with_no_rows_is_an_error_naming_the_task(paper_env, placeholder):
    from vrh_lmms.tasks.common.vqa_data import load_vqa_docs

    docs = load_vqa_docs("mathvista", "testmini", "vrh_vqa_paper_mathvista_mcq", placeholder())
    with pytest.raises(SourceError, match="vrh_vqa_paper_mathvista_mcq: none of the 5 rows"):
        VP.select(docs, [False] * len(docs), "vrh_vqa_paper_mathvista_mcq")


def test_subset_filters_read_the_benchmarks_fields(paper_env, placeholder):
    size = VP.vrh_vqa_paper_spatialrgpt_object_size(placeholder())
    assert {json.loads(m)["category"] for m in size["vrh_meta"]} == {"width_data", "height_data"}
    assert V.process_results(size[0], ["About 115 cm wide."])["acc"]["score"] == 1.0  # 1.2 m +-25%
    mcq = VP.vrh_vqa_paper_mathvista_mcq(placeholder())
    assert "A. the cube\nB. the ball" in V.doc_to_text(mcq[0])
    assert V.process_results(mcq[1], ["B"])["acc"]["score"] == 1.0
    assert V.process_results(mcq[1], ["C"])["acc"]["score"] == 0.0
    cv = VP.vrh_vqa_paper_cv_bench(placeholder())
    assert [json.loads(m)["source"] for m in cv["vrh_meta"]] == ["ADE20K", "COCO", "Omni3D"]  # default config only


def test_vaw_mc_docs(paper_env, placeholder):
    docs = VP.vrh_vqa_paper_vaw_mc(placeholder())
    color, material = docs[0], docs[1]
    lines = V.doc_to_text(color).split("\n")
    assert lines[0] == "What is the color of the shirt in the red box?"
    assert [x[:3] for x in lines[1:5]] == ["A. ", "B. ", "C. ", "D. "]
    assert sorted(x[3:] for x in lines[1:5]) == ["blue", "green", "red", "yellow"]
    assert lines[5] == "Answer with the option's letter from the given choices directly."
    assert color["vrh_options"]["ABCD".index(color["vrh_target"])] == "red"
    assert material["vrh_options"]["ABCD".index(material["vrh_target"])] == "wooden"
    right = V.process_results(color, [color["vrh_target"]])
    assert right["acc"]["score"] == 1.0
    rec = right["vrh_record"]
    assert (rec["attribute"], rec["attribute_type"], rec["parent_type"]) == ("red", "color", "color")
    assert "polarity" not in rec  # not read as VAW's yes/no pairs by the official metrics
    wrong = next(L for L in "ABCD" if L != color["vrh_target"])
    assert V.process_results(color, [wrong])["acc"]["score"] == 0.0
    assert V.process_results(color, ["red"])["acc"]["score"] == 1.0  # the option's text is read as its letter
    assert V.doc_to_visual(color)[0].getpixel((4, 6)) == (255, 0, 0)  # instance box (xywh 4,6,20,16) outlined
    # the rule is a setting: all parents but action -> 3 options -> the action instance and the 2-negative one join
    paper_env.setenv("VRH_VAW_MC", json.dumps({"options": 3, "parents": ["color", "material", "action"]}))
    more = VP.vrh_vqa_paper_vaw_mc(placeholder())
    assert more["question_id"] == ["2370001001:mc", "2370002002:mc", "2370003003:mc", "2370004004:mc"]
    paper_env.setenv("VRH_VAW_MC", '{"parents": ["shape"]}')
    with pytest.raises(SourceError, match=r"none of the 5 VAW instances .*qualifies.*\"shape\""):
        VP.vrh_vqa_paper_vaw_mc(placeholder())
    paper_env.setenv("VRH_VAW_MC", '{"option": 3}')
    with pytest.raises(VAWMCError, match="unknown key.*option"):
        VP.vrh_vqa_paper_vaw_mc(placeholder())


def test_vaw_count_command(sources, capsys):
    VP.main([sources["VRH_VAW_ROOT"]])
    out = json.loads(capsys.readouterr().out)
    assert out["instances"] == 5 and out["questions"] == 2 and out["paper"] == 6309
    assert out["per_parent"] == {"color": 1, "material": 1}
    with pytest.raises(SystemExit, match=r"error: .*val\.json is missing"):
        VP.main([sources["VRH_VAW_ROOT"], "--rule", '{"split": "val"}'])
    with pytest.raises(SystemExit, match="error: VRH_VAW_MC: unknown key"):
        VP.main([sources["VRH_VAW_ROOT"], "--rule", '{"spilt": "val"}'])


# ------------------------------------------------------------------------------------------ lmms-eval
@pytest.fixture(scope="module")
def manager():
    from lmms_eval.tasks import TaskManager

    return TaskManager(include_path=str(tasks_path()), model_name="qwen2_5_vl")


def test_group_is_indexed_and_vrh_vqa_unchanged(manager):
    ours = str(tasks_path())
    for name in TASKS + ["vrh_vqa_paper", "vrh_vqa"]:
        assert str(manager.task_index[name]["yaml_path"]).startswith(ours), name
    for task in TASKS:
        cfg = manager._get_config(task)
        assert cfg["process_docs"].__name__ == task
        assert cfg["generation_kwargs"]["max_new_tokens"] <= 128 and cfg["generation_kwargs"]["do_sample"] is False


def _mean_and_stderr(values):
    n = len(values)
    mean = sum(values) / n
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) / math.sqrt(n)


def test_group_metrics_in_lmms_eval_match_a_direct_computation(manager, paper_env):
    from lmms_eval.evaluator import simple_evaluate
    from test_tasks_lmms_eval import _Scripted

    out = simple_evaluate(model=_Scripted.make(lambda i, doc: doc["vrh_target"] if i % 2 == 0 else "no idea"),
                          tasks=["vrh_vqa_paper"], task_manager=manager, log_samples=True)
    results, samples = out["results"], out["samples"]
    all_acc = []
    for task in TASKS:
        got = [s["doc"]["question_id"] if "question_id" in s["doc"] else None for s in samples[task]]
        assert len(samples[task]) == len(data.KEPT[task]), (task, got)
        acc = [s["acc"]["score"] for s in samples[task]]
        assert acc == [float(i % 2 == 0) for i in range(len(acc))], task
        all_acc += acc
        if len(acc) > 1:
            mean, stderr = _mean_and_stderr(acc)
            assert results[task]["acc,none"] == pytest.approx(mean)
            assert results[task]["acc_stderr_clt,none"] == pytest.approx(stderr)
    assert results["vrh_vqa_paper"]["acc,none"] == pytest.approx(sum(all_acc) / len(all_acc))


@pytest.mark.slow
def test_lmms_eval_cli_runs_the_group_on_a_tiny_model(tiny_qwen25, sources, tmp_path):
    """`lmms-eval --tasks vrh_vqa_paper --limit 1` on the tiny Qwen2.5-VL: every subtask scores its docs."""
    out = tmp_path / "out"
    cmd = [str(Path(sys.executable).with_name("lmms-eval")), "--model", "qwen2_5_vl", "--model_args",
           f"pretrained={tiny_qwen25},device_map=cpu", "--device", "cpu", "--tasks", "vrh_vqa_paper",
           "--include_path", str(tasks_path()), "--limit", "1", "--batch_size", "1", "--output_path", str(out),
           "--log_samples"]
    env = offline_env(VRH_CACHE_DIR=str(tmp_path / "cache"), **sources)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    results = sorted(out.rglob("*_results.json"))
    assert results, (proc.stdout + proc.stderr)[-3000:]
    res = json.loads(results[-1].read_text())["results"]
    assert isinstance(res["vrh_vqa_paper"]["acc,none"], float)
    for task in TASKS:
        assert res[task]["acc,none"] in (0.0, 1.0) and res[task]["parse_failure,none"] in (0.0, 1.0), task
        lines = [json.loads(x) for x in next(out.rglob(f"*_samples_{task}.jsonl")).read_text().splitlines()]
        assert len(lines) == 1 and lines[0]["vrh_record"]["kind"] == "vqa"
