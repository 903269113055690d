"""Official headline metrics (VAW's per-class metrics, CV-Bench's source-weighted score) rebuilt from the records
our tasks write, checked against scikit-learn (VAW's evaluator uses it) and lmms-eval's own CV-Bench aggregation,
and shown by the report beside plain accuracy."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from sklearn.metrics import average_precision_score, balanced_accuracy_score, f1_score, precision_score, recall_score
from test_tasks_real_schemas import REAL, _official_parent, _parquet, cv_bench_rows

from vrh_lmms.report import official_metrics as OM
from vrh_lmms.tasks.common import vqa as V
from vrh_lmms.tasks.common import vqa_data as VD

# VAW test split (adobe-research/vaw_dataset, issue 12): 57,029 positive vs 166,578 negative labels -> 74.5% "no".
NEG_SHARE = 166578 / (57029 + 166578)
POOL = ["red", "white", "striped", "wooden", "standing", "wet", "dark", "thin", "larger", "round", "metal", "blond"]


@pytest.fixture
def vaw_docs(tmp_path, vrh_env, placeholder):
    """~1,000 (instance, attribute) questions in VAW's test.json schema, labels 74.5% negative as in VAW test."""
    rng = np.random.default_rng(12)
    root = tmp_path / "vaw_dataset"
    (root / "data").mkdir(parents=True)
    images = tmp_path / "VG_100K"
    images.mkdir()
    instances = []
    for k in range(120):
        image_id = 1000 + k % 6
        if k < 6:
            Image.new("RGB", (100, 80), (90, 90, 90)).save(images / f"{image_id}.jpg")
        attrs = list(rng.choice(POOL, size=8, replace=False))
        positive = [a for a in attrs if rng.random() > NEG_SHARE]
        instances.append({"image_id": image_id, "instance_id": 5000 + k, "instance_bbox": [5.0, 5.0, 40.0, 30.0],
                          "instance_polygon": None, "object_name": "thing", "positive_attributes": positive,
                          "negative_attributes": [a for a in attrs if a not in positive]})
    (root / "data" / "test.json").write_text(json.dumps(instances))
    for name in ("attribute_types.json", "attribute_parent_types.json"):
        shutil.copy(REAL / f"vaw_{name}", root / "data" / name)
    vrh_env.setenv("VRH_VAW_ROOT", str(root))
    vrh_env.setenv("VRH_VAW_IMAGES", str(images))
    return VD.vrh_vaw(placeholder())


def _records(docs, replies) -> list[dict]:
    return [V.process_results(d, [r])["vrh_record"] for d, r in zip(docs, replies, strict=True)]


def test_always_no_scores_plain_accuracy_but_not_balanced_accuracy(vaw_docs):
    recs = _records(vaw_docs, ["No."] * len(vaw_docs))
    plain = np.mean([r["correct"] for r in recs])
    assert plain == pytest.approx(NEG_SHARE, abs=0.04)  # the label prior, nothing seen
    head = OM.headline(recs)
    assert head["metric"] == "mA" and head["accuracy"] == pytest.approx(plain)
    assert head["value"] == pytest.approx(0.5)  # balanced accuracy of a constant answer, every class
    assert set(head["by"]) == {_official_parent(a) for a in POOL} and all(v == 0.5 for v in head["by"].values())
    assert head["details"]["mean_recall"] == 0.0


def test_vaw_per_class_metrics_match_sklearn(vaw_docs):
    rng = np.random.default_rng(3)
    replies = [str(rng.choice(["Yes", "No", "I cannot tell"], p=[0.35, 0.55, 0.10])) for _ in vaw_docs]
    recs = _records(vaw_docs, replies)
    got = OM.vaw_metrics(recs)
    by_attr: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for r in recs:
        label = int(r["polarity"] == "positive")
        pred = {"yes": 1, "no": 0}.get(r["pred"], 1 - label)  # a parse failure is the wrong answer
        by_attr[r["attribute"]].append((label, pred))
    ref = {}
    for attr, rows in by_attr.items():
        y, p = np.asarray(rows).T
        assert 0 < y.sum() < len(y), attr  # every class has both polarities in this fixture
        ref[attr] = {"bacc": balanced_accuracy_score(y, p), "ap": average_precision_score(y, p),
                     "recall": recall_score(y, p), "precision": precision_score(y, p, zero_division=1),
                     "f1": f1_score(y, p, zero_division=0)}
    assert set(got["per_class"]) == set(ref) and got["classes_without_both_polarities"] == 0
    for attr, m in ref.items():
        for key, value in m.items():
            assert got["per_class"][attr][key] == pytest.approx(value), (attr, key)
    assert got["mA"] == pytest.approx(np.mean([m["bacc"] for m in ref.values()]))
    assert got["mAP"] == pytest.approx(np.mean([m["ap"] for m in ref.values()]))
    assert got["mean_recall"] == pytest.approx(np.mean([m["recall"] for m in ref.values()]))
    labels = [int(r["polarity"] == "positive") for r in recs]
    preds = [{"yes": 1, "no": 0}.get(r["pred"], 1 - y) for r, y in zip(recs, labels, strict=True)]
    assert got["f1_overall"] == pytest.approx(f1_score(labels, preds))  # the evaluator's "overall" (micro) F1
    for parent, group in got["by_parent_type"].items():
        members = [a for a in ref if _official_parent(a) == parent]
        assert group["n_classes"] == len(members)
        assert group["mA"] == pytest.approx(np.mean([ref[a]["bacc"] for a in members]))


def _lmms_eval_cv_bench_utils():
    """lmms_eval/tasks/cv_bench/utils.py, loaded alone (importing lmms_eval.tasks indexes every task: slow)."""
    import importlib.util

    import lmms_eval

    path = Path(lmms_eval.__file__).parent / "tasks" / "cv_bench" / "utils.py"
    spec = importlib.util.spec_from_file_location("lmms_eval_cv_bench_utils", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cv_bench_score_matches_lmms_eval_aggregation(tmp_path, vrh_env, placeholder):
    cv_bench_default_aggregate_results = _lmms_eval_cv_bench_utils().cv_bench_default_aggregate_results

    rows = cv_bench_rows() * 3
    for i, r in enumerate(rows):
        r = r.copy()
        r["idx"] = i
        rows[i] = r
    _parquet(tmp_path / "test.parquet", rows)
    vrh_env.setenv("VRH_CV_BENCH_DATA", str(tmp_path))
    docs = VD.vrh_cv_bench(placeholder())
    rng = np.random.default_rng(1)
    replies = [str(rng.choice(["A", "B", "(A) one", "hmm"])) for _ in docs]
    recs = _records(docs, replies)
    got = OM.cv_bench_score(recs)
    submissions = [{"source": r["source"], "is_correct": r["correct"]} for r in recs]
    assert got["score"] == pytest.approx(cv_bench_default_aggregate_results(submissions))
    assert OM.headline(recs)["value"] == got["score"]
    two_d = [r for r in recs if r["source"] != "Omni3D"]
    assert OM.cv_bench_score(two_d)["score"] == pytest.approx(
        (np.mean([r["correct"] for r in two_d if r["source"] == "ADE20K"])
         + np.mean([r["correct"] for r in two_d if r["source"] == "COCO"])) / 2)


def _write_run(root: Path, config_id: str, kind: str, task: str, records: list[dict]) -> None:
    folder = root / "configs" / config_id
    folder.mkdir(parents=True)
    with open(folder / f"samples_{task}.jsonl", "w") as fh:
        for i, rec in enumerate(records):
            fh.write(json.dumps({"doc_id": i, "acc": float(rec["correct"]), "vrh_record": rec}) + "\n")
    vrh = {"schema": 1, "family": "qwen2_5_vl", "pretrained": "org/M",
           "geometry": {"layers": 2, "heads": 4, "kv_heads": 2, "head_dim": 8},
           "ablation": {"spec": config_id, "heads": [], "mode": "none" if kind == "baseline" else "zero",
                        "seed": 0, "method": None, "heads_file": None},
           "config": {"id": config_id, "kind": kind, "k": None if kind == "baseline" else 2, "seed": None}}
    (folder / "results.json").write_text(json.dumps({"results": {task: {"alias": task}}, "model_name": "org/M",
                                                     "vrh": vrh}))


def test_report_shows_the_official_headline_beside_accuracy(vaw_docs, tmp_path):
    from vrh_lmms.report import ReportSettings, build_report

    base = _records(vaw_docs, ["No."] * len(vaw_docs))
    ablated = _records(vaw_docs, ["Yes."] * len(vaw_docs))
    runs = tmp_path / "sweep"
    _write_run(runs, "baseline", "baseline", "vrh_vaw", base)
    _write_run(runs, "explicit", "explicit", "vrh_vaw", ablated)
    report = build_report([runs], tmp_path / "report", ReportSettings(n_resamples=200, plots=False))
    group = report["groups"][0]
    official = group["baseline"]["official"]
    assert official["metric"] == "mA" and official["value"] == pytest.approx(0.5)
    assert official["accuracy"] == pytest.approx(group["baseline"]["accuracy"]["mean"])
    assert group["configs"][0]["official"]["value"] == pytest.approx(0.5)
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Official benchmark metrics (headline)" in md and "| mA | **50.0** |" in md


def test_no_official_metric_for_plain_accuracy_benchmarks():
    recs = [{"kind": "vqa", "correct": True, "question_type": "count", "pred": "3", "target": "3"}]
    assert OM.headline(recs) is None
    assert OM.headline([{"kind": "grounding", "correct": True}]) is None
