"""The vrh task YAMLs inside lmms-eval: indexed offline, wired to the right functions, evaluated with standard
errors (in process, with a scripted model), and end to end on the tiny Qwen2.5-VL (slow, subprocess)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import offline_env

from vrh_lmms.base.paths import tasks_path

GROUNDING = ["vrh_refcoco_val", "vrh_refcoco_testA", "vrh_refcoco_testB", "vrh_refcoco_plus_val",
             "vrh_refcoco_plus_testA", "vrh_refcoco_plus_testB", "vrh_refcocog_val", "vrh_refcocog_test",
             "vrh_toloka", "vrh_toloka_private", "vrh_refspatial_location", "vrh_refspatial_placement",
             "vrh_refspatial_unseen", "vrh_synth_grounding", "vrh_synth_grounding_refer"]
VQA = ["vrh_vaw", "vrh_spatialrgpt", "vrh_cv_bench", "vrh_cv_bench_2d", "vrh_cv_bench_3d", "vrh_mmstar",
       "vrh_countbenchqa", "vrh_mathvista_testmini", "vrh_synth_vqa", "vrh_synth_text_needle",
       "vrh_synth_audio_needle"] + [
    f"vrh_spatial457_{lvl}" for lvl in ("l1_single", "l2_objects", "l3_2d_spatial", "l4_occ", "l4_pose",
                                        "l5_6d_spatial", "l5_collision")]
VQA += ["vrh_synth_needle_clip", "vrh_synth_fact_text", "vrh_synth_fact_image", "vrh_synth_fact_audio"]
GROUPS = ["vrh_refcoco", "vrh_refcoco_plus", "vrh_refcocog", "vrh_refspatial", "vrh_grounding", "vrh_spatial457",
          "vrh_vqa", "vrh_vqa_paper"]
VQA += ["vrh_vqa_paper_vaw_mc", "vrh_vqa_paper_spatial457_l1_single", "vrh_vqa_paper_spatialrgpt_object_size",
        "vrh_vqa_paper_cv_bench", "vrh_vqa_paper_mmstar", "vrh_vqa_paper_countbenchqa", "vrh_vqa_paper_mathvista_mcq"]


@pytest.fixture(scope="module")
def manager():
    from lmms_eval.tasks import TaskManager

    return TaskManager(include_path=str(tasks_path()), model_name="qwen2_5_vl")


def test_every_task_and_group_is_indexed(manager):
    missing = [name for name in GROUNDING + VQA + GROUPS if name not in manager.all_tasks]
    assert not missing
    assert set(GROUPS) <= set(manager.all_groups)
    ours = str(tasks_path())
    # built-in names win silently over plugin tasks: every name must resolve to our YAML
    assert all(str(manager.task_index[name]["yaml_path"]).startswith(ours) for name in GROUNDING + VQA + GROUPS)
    assert all(name.startswith("vrh_") for name in manager.all_tasks
               if str(manager.task_index[name]["yaml_path"]).startswith(ours))


@pytest.mark.parametrize("task", GROUNDING + VQA)
def test_yaml_wiring(manager, task):
    """Each task's process_docs is its own loader; generation is greedy and capped; metrics average (stderr)."""
    cfg = manager._get_config(task)
    assert cfg["process_docs"].__name__ == task
    assert cfg["dataset_path"] == "json" and Path(next(iter(cfg["dataset_kwargs"]["data_files"].values()))).is_file()
    assert list(cfg["dataset_kwargs"]["data_files"]) == [cfg["test_split"]]
    gen = cfg["generation_kwargs"]
    assert gen["max_new_tokens"] <= 128 and gen["temperature"] == 0 and gen["do_sample"] is False
    metrics = {m["metric"]: m for m in cfg["metric_list"]}
    expected = {"acc50", "iou", "parse_failure", "mislocated"} if task in GROUNDING and "refspatial" not in task \
        else ({"acc", "parse_failure", "mislocated"} if "refspatial" in task else {"acc", "parse_failure"})
    assert set(metrics) == expected
    # the grounding and VQA templates' metrics carry their image (lmms-eval's clustered SE); the others are numbers
    from vrh_lmms.tasks.common import grounding, records, vqa

    # (the tasks with a scorer of their own read as numbers: mean_score takes both; refspatial has its own list)
    assert all(m["aggregation"] == ("mean" if "refspatial" in task else records.mean_score)
               for m in metrics.values()), metrics
    assert cfg["cluster_key"] == "image_id" and cfg.get("score_key", "score") == "score"
    if cfg["process_results"] in (grounding.process_results, vqa.process_results):
        assert all(m["aggregation"] is records.mean_score for m in metrics.values())
    for fn in ("doc_to_visual", "doc_to_text", "process_results"):
        assert callable(cfg[fn]), fn
    if task in GROUNDING:
        kw = cfg["lmms_eval_specific_kwargs"]
        for model, conv in {"qwen2_5_vl": "qwen2_5_vl", "qwen3_vl": "qwen3_vl", "internvl_hf": "internvl",
                            "llava_hf": "llava_next", "glm4v": "glm4v", "default": "generic"}.items():
            assert kw[model]["convention"] == conv
        # vrh_* models get theirs from their wrapper's family (set_active), not from the task YAML
        from vrh_lmms.base.families import FAMILIES

        for model, conv in {"vrh_qwen25": "qwen2_5_vl", "vrh_paligemma": "paligemma",
                            "vrh_deepseek_vl2": "deepseek_vl2", "vrh_magma": "magma",
                            "vrh_phi4": "phi4_multimodal"}.items():
            assert model not in kw
            assert [f.box_convention for f in FAMILIES.values() for w in f.wrappers if w.model_id == model] == [conv]


# ------------------------------------------------------------------------------------------ in-process evaluate
class _Scripted:
    """Build lazily: lmms-eval's base class is imported only when the test runs."""

    @staticmethod
    def make(reply):
        from lmms_eval.api.model import lmms

        class Scripted(lmms):
            def __init__(self):
                super().__init__()
                self.task_dict = {}

            def generate_until(self, requests):
                out = []
                for req in requests:
                    _ctx, _gen, _visual, doc_id, task, split = req.args
                    out.append(reply(doc_id, self.task_dict[task][split][doc_id]))
                return out

            def loglikelihood(self, requests):
                raise NotImplementedError

            def generate_until_multi_round(self, requests):
                raise NotImplementedError

        return Scripted()


def _grounding_reply(doc_id, doc):
    # lmms-eval's qwen2_5_vl defaults resize a 224 image to 448: a correct Qwen2.5-VL box is twice the GT.
    if doc_id % 3 == 0:
        return json.dumps([{"bbox_2d": [2 * v for v in doc["gt_box"]], "label": "x"}])
    if doc_id % 3 == 1:
        return '[{"bbox_2d": [0, 0, 6, 6]}]'
    return "no box here"


def _mean_and_stderr(values):
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, sd / math.sqrt(n)


def _clustered_stderr(values, clusters):
    """SE^2 = var(ddof=1) / n + (1 / n^2) * sum over clusters of the cross products of residuals within it."""
    n = len(values)
    mean, stderr = _mean_and_stderr(values)
    cross = 0.0
    for c in set(clusters):
        resid = [v - mean for v, k in zip(values, clusters, strict=True) if k == c]
        cross += sum(resid) ** 2 - sum(r * r for r in resid)
    return math.sqrt(stderr ** 2 + cross / n ** 2)


def test_aggregates_and_standard_errors_match_a_direct_computation(manager, vrh_env):
    from lmms_eval.evaluator import simple_evaluate

    vrh_env.setenv("VRH_SYNTH_CONFIG", json.dumps({"objects": "all"}))  # an expression per object: images repeat
    out = simple_evaluate(model=_Scripted.make(_grounding_reply), tasks=["vrh_synth_grounding"], limit=14,
                          task_manager=manager, log_samples=True)
    res = out["results"]["vrh_synth_grounding"]
    samples = out["samples"]["vrh_synth_grounding"]
    assert len(samples) == 14
    statuses = [s["vrh_record"]["status"] for s in sorted(samples, key=lambda s: s["doc_id"])]
    assert statuses[:3] == ["correct", "mislocated", "parse_failure"]
    assert all(s["vrh_record"]["convention"] == "qwen2_5_vl" for s in samples)  # --model qwen2_5_vl mapping
    images = [s["vrh_record"]["image_id"] for s in samples]
    assert len(set(images)) < len(images)  # some images hold two docs: clustering matters
    for metric in ("acc50", "iou", "parse_failure", "mislocated"):
        values = [s[metric]["score"] for s in samples]
        assert [s[metric]["image_id"] for s in samples] == images
        mean, stderr = _mean_and_stderr(values)
        assert res[f"{metric},none"] == pytest.approx(mean)
        assert res[f"{metric}_stderr_clt,none"] == pytest.approx(stderr)  # lmms-eval's naive SE
        # cluster_key: image_id -> lmms-eval's clustered SE, its Eq. 4 (arXiv 2411.00640) computed here by hand
        assert res[f"{metric}_stderr_clustered,none"] == pytest.approx(_clustered_stderr(values, images))
    assert res["acc50,none"] == pytest.approx(5 / 14)
    assert res["acc50_stderr_clustered,none"] != pytest.approx(res["acc50_stderr_clt,none"], rel=1e-3)
    assert [s["score"] for s in samples] == [s["acc50"]["score"] for s in samples]  # what --baseline pairs on


def test_vqa_task_runs_in_lmms_eval_on_local_files(manager, vrh_env, tmp_path):
    import datasets
    from lmms_eval.evaluator import simple_evaluate
    from PIL import Image

    rows = [{"index": i, "question": f"Q{i}?\nOptions: A: a, B: b, C: c, D: d", "image": Image.new("RGB", (32, 32)),
             "answer": "ABCD"[i % 4], "category": "cat", "l2_category": "l2"} for i in range(6)]
    datasets.Dataset.from_list(rows).cast_column("image", datasets.Image()).to_parquet(str(tmp_path / "val.parquet"))
    vrh_env.setenv("VRH_MMSTAR_DATA", str(tmp_path))
    out = simple_evaluate(model=_Scripted.make(lambda i, doc: "A" if i % 2 == 0 else "(B)"), tasks=["vrh_mmstar"],
                          task_manager=manager, log_samples=True)
    res, samples = out["results"]["vrh_mmstar"], out["samples"]["vrh_mmstar"]
    mean, stderr = _mean_and_stderr([s["acc"]["score"] for s in samples])
    assert res["acc,none"] == pytest.approx(mean) == pytest.approx(4 / 6)
    assert res["acc_stderr_clt,none"] == pytest.approx(stderr)
    images = [s["acc"]["image_id"] for s in samples]
    assert res["acc_stderr_clustered,none"] == pytest.approx(_clustered_stderr([s["acc"]["score"] for s in samples],
                                                                               images))
    assert {s["vrh_record"]["kind"] for s in samples} == {"vqa"}


# ------------------------------------------------------------------------------------------ subprocesses (slow)
def _lmms_eval() -> str:
    return str(Path(sys.executable).with_name("lmms-eval"))


@pytest.mark.slow
def test_cli_lists_every_task_offline(tmp_path):
    proc = subprocess.run([_lmms_eval(), "--tasks", "list", "--include_path", str(tasks_path())],
                          env=offline_env(HF_HOME=str(tmp_path / "hf")), capture_output=True, text=True, timeout=300,
                          check=False)
    listed = proc.stdout + proc.stderr
    missing = [name for name in GROUNDING + VQA + GROUPS if f" {name}\n" not in listed and f" {name} " not in listed]
    assert not missing, listed[-2000:]


@pytest.mark.slow
def test_end_to_end_tiny_qwen25(tiny_qwen25, tmp_path):
    """`lmms-eval --model qwen2_5_vl` on both synthetic tasks: random weights give garbage -> parse failures.
    lmms-eval exits 0 even when evaluation fails, so the output files are what is checked."""
    out = tmp_path / "out"
    cmd = [_lmms_eval(), "--model", "qwen2_5_vl", "--model_args", f"pretrained={tiny_qwen25},device_map=cpu",
           "--device", "cpu", "--tasks", "vrh_synth_grounding,vrh_synth_grounding_refer", "--include_path",
           str(tasks_path()), "--limit", "3", "--batch_size", "1", "--output_path", str(out), "--log_samples"]
    env = offline_env(VRH_CACHE_DIR=str(tmp_path / "cache"), VRH_SYNTH_CONFIG='{"n": 6}')
    env.pop("VRH_BOX_CONVENTION", None)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    results = sorted(out.rglob("*_results.json"))
    assert results, (proc.stdout + proc.stderr)[-3000:]
    data = json.loads(results[-1].read_text())
    for task in ("vrh_synth_grounding", "vrh_synth_grounding_refer"):
        res = data["results"][task]
        for metric in ("acc50", "iou", "parse_failure", "mislocated"):
            assert isinstance(res[f"{metric},none"], float)
            assert isinstance(res[f"{metric}_stderr_clt,none"], float)  # lmms-eval's naive and clustered SE
            assert isinstance(res[f"{metric}_stderr_clustered,none"], float)
        lines = [json.loads(x) for x in next(out.rglob(f"*_samples_{task}.jsonl")).read_text().splitlines()]
        assert len(lines) == 3
        for line in lines:
            rec = line["vrh_record"]
            assert rec["kind"] == "grounding" and rec["convention"] == "qwen2_5_vl"
            assert rec["status"] in ("correct", "mislocated", "parse_failure")
            assert rec["image_size"] == [224, 224] and len(rec["gt_box"]) == 4 and rec["raw"] is not None
            assert (rec["pred_box"] is None) == (rec["status"] == "parse_failure")
            assert line["parse_failure"] == {"score": float(rec["status"] == "parse_failure"),
                                             "image_id": rec["image_id"]}
