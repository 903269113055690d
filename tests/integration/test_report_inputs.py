"""`vrh-lmms report` on mixed inputs: plain lmms-eval baselines, missing baselines, cross-model transfer, VQA,
`--score-field`, heads files (heatmaps, overlap) and malformed input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vrh_lmms.base.heads.heads_file import ranking_from_scores
from vrh_lmms.cli import main

MODEL = "org/Tiny-VLM-2B"
OTHER = "org/Other-VLM-7B"


def _grounding(doc_id: int, status: str) -> dict:
    return {"doc_id": doc_id, "input": "Locate it.", "vrh_record": {
        "kind": "grounding", "image_id": f"img{doc_id // 3}", "pred_box": None, "gt_box": [0, 0, 1, 1], "iou": 0.0,
        "correct": status == "correct", "status": status, "n_boxes": 1, "convention": "qwen2_5_vl",
        "image_size": [10, 10], "raw": status, "expression": "it"}}


def _vqa(doc_id: int, status: str) -> dict:
    return {"doc_id": doc_id, "input": "Which?", "vrh_record": {
        "kind": "vqa", "image_id": f"img{doc_id // 2}", "correct": status == "correct", "status": status,
        "pred": "A", "target": "A" if status == "correct" else "B", "raw": "A", "question_type": "count"}}


def _vrh(config_id: str, kind: str, k, seed=None, heads_model: str | None = MODEL) -> dict:
    return {"schema": 1, "family": "qwen2_5_vl", "pretrained": MODEL, "geometry": {},
            "ablation": {"spec": config_id, "heads": [], "mode": "none" if kind == "baseline" else "zero",
                         "seed": seed, "method": "hook",
                         "heads_file": None if heads_model is None else {"path": "h.json", "sha256": "x",
                                                                         "model": heads_model}},
            "config": {"id": config_id, "kind": kind, "k": k, "seed": seed}}


def _sweep_config(root: Path, config_id: str, vrh: dict, tasks: dict[str, list[dict]]) -> None:
    folder = root / "configs" / config_id
    folder.mkdir(parents=True)
    for task, lines in tasks.items():
        (folder / f"samples_{task}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (folder / "results.json").write_text(json.dumps({"results": {}, "vrh": vrh}))


def _plain(root: Path, model: str, tasks: dict[str, list[dict]], date: str = "2026-01-01T00-00-00.000001") -> None:
    folder = root / model.replace("/", "__")
    folder.mkdir(parents=True)
    for task, lines in tasks.items():
        (folder / f"{date}_samples_{task}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    results = {"results": {t: {} for t in tasks}, "model_name": model,
               "config": {"model": "qwen2_5_vl", "model_args": f"pretrained={model},max_pixels=100"}}
    (folder / f"{date}_results.json").write_text(json.dumps(results))


def _statuses(n: int, n_correct: int, wrong: str = "mislocated") -> list[str]:
    return ["correct"] * n_correct + [wrong] * (n - n_correct)


def _group(rep: dict, task: str) -> dict:
    return next(g for g in rep["groups"] if g["task"] == task)


def _cfg(group: dict, label: str) -> dict:
    return next(c for c in group["configs"] if c["label"] == label)


@pytest.fixture()
def mixed(tmp_path) -> tuple[Path, Path]:
    """Plain lmms-eval baseline for task A and VQA task V; a sweep (no baseline config) with top4, random4 x2 and
    a transferred top4; task B has no baseline anywhere."""
    plain, sweep = tmp_path / "lmms_out", tmp_path / "sweep"
    a_base = [_grounding(i, s) for i, s in enumerate(_statuses(30, 27))]
    v_base = [_vqa(i, s) for i, s in enumerate(_statuses(20, 16, "wrong"))]
    _plain(plain, MODEL, {"task_a": a_base, "task_v": v_base})
    configs = {
        "top4": (_vrh("top4", "topk", 4), 9),
        "random4_s0": (_vrh("random4_s0", "random", 4, 0, None), 26),
        "random4_s1": (_vrh("random4_s1", "random", 4, 1, None), 25),
    }
    for config_id, (vrh, n_ok) in configs.items():
        _sweep_config(sweep, config_id, vrh, {
            "task_a": [_grounding(i, s) for i, s in enumerate(_statuses(30, n_ok))],
            "task_b": [_grounding(i, s) for i, s in enumerate(_statuses(12, 6))],
            "task_v": [_vqa(i, s) for i, s in enumerate(_statuses(20, 5, "wrong"))],
        })
    other = tmp_path / "sweep_transfer"
    _sweep_config(other, "top4", _vrh("top4", "topk", 4, heads_model=OTHER),
                  {"task_a": [_grounding(i, s) for i, s in enumerate(_statuses(30, 20))]})
    return plain, sweep


def _run(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "report"
    assert main(["report", *args, "--output", str(out), "--n-resamples", "500"]) == 0
    return json.loads((out / "report.json").read_text())


def test_plain_lmms_eval_baseline_pairs_with_sweep_and_missing_baseline_is_reported(mixed, tmp_path):
    plain, sweep = mixed
    rep = _run(tmp_path, str(plain), str(sweep), str(sweep.parent / "sweep_transfer"))
    a = _group(rep, "task_a")
    assert a["baseline"]["results"].endswith("_results.json") and a["baseline"]["accuracy"]["mean"] == 27 / 30
    assert _cfg(a, "top4")["drop"]["drop"] == pytest.approx(27 / 30 - 9 / 30)
    b = _group(rep, "task_b")
    assert b["baseline"] is None and all(c["drop"] is None for c in b["configs"])
    assert _cfg(b, "top4")["accuracy"]["mean"] == 0.5
    assert any("task_b" in w and "no baseline" in w for w in rep["warnings"])
    md = (tmp_path / "report" / "report.md").read_text()
    assert "| Tiny-VLM-2B | task_b | top4 of h.json | zero | n/a | 50.0 | n/a |" in md
    claim = next(c["sentence"] for c in rep["claims"] if c["task"] == "task_b")
    assert claim.endswith("acc50 50.0 on 12 docs; no baseline run, so no drop and no test.")


def test_cross_model_transfer_is_shown_beside_own_heads(mixed, tmp_path):
    plain, sweep = mixed
    rep = _run(tmp_path, str(plain), str(sweep), str(sweep.parent / "sweep_transfer"))
    a = _group(rep, "task_a")
    transferred = _cfg(a, "top4@Other-VLM-7B")
    assert transferred["heads_source"] == OTHER and transferred["accuracy"]["mean"] == pytest.approx(20 / 30)
    (row,) = rep["transfer"]
    assert row["heads_from"] == OTHER and row["task"] == "task_a"
    assert row["own"]["label"] == "top4" and row["own"]["drop"] == pytest.approx(18 / 30)
    assert row["transferred"]["drop"] == pytest.approx(7 / 30)
    # The transferred top-k is compared with the model's own random heads (random heads ignore the heads file).
    comp = next(n for n in a["null_comparisons"] if n["config"] == "top4@Other-VLM-7B")
    assert comp["null_source"] == "own" and comp["null_configs"] == ["random4_s0", "random4_s1"]
    assert "## Cross-model transfer of heads" in (tmp_path / "report" / "report.md").read_text()


def test_vqa_uses_wrong_not_mislocated(mixed, tmp_path):
    plain, sweep = mixed
    rep = _run(tmp_path, str(plain), str(sweep))
    v = _group(rep, "task_v")
    assert v["kind"] == "vqa" and v["metric"] == "acc"
    top = _cfg(v, "top4")
    assert top["taxonomy"]["counts"] == {"correct": 5, "wrong": 15, "parse_failure": 0}
    assert top["lost_to"] == {"wrong": 11, "parse_failure": 0}
    assert top["drop"]["drop"] == pytest.approx(16 / 20 - 5 / 20)
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Failure taxonomy (VQA)" in md and "| Wrong % |" in md


def test_score_field_reads_plain_tasks(tmp_path):
    plain = tmp_path / "plain"
    iou = [0.9, 0.1, 0.7, 0.4]
    _plain(plain, MODEL, {"refcoco_bbox_rec_val": [{"doc_id": i, "iou_score": v} for i, v in enumerate(iou)]})
    assert main(["report", str(plain), "--output", str(tmp_path / "bad"), "--no-plots"]) == 2
    rep = _run(tmp_path, str(plain), "--score-field", "iou_score")
    acc = rep["groups"][0]["baseline"]["accuracy"]
    assert acc["mean"] == pytest.approx(np.mean(iou)) and acc["method"] == "t"
    assert acc["se"] == pytest.approx(np.std(iou, ddof=1) / 2)


def test_score_field_reads_a_metric_written_with_its_cluster(tmp_path):
    """Our tasks write each metric as lmms-eval's clustered-SE item, {"score": x, "image_id": id}: --score-field acc50
    reads its score, as it reads a plain number (runs of earlier versions)."""
    values = [1.0, 0.0, 1.0, 1.0]
    for name, rows in (("items", [{"doc_id": i, "acc50": {"score": v, "image_id": str(i // 2)}}
                                  for i, v in enumerate(values)]),
                       ("numbers", [{"doc_id": i, "acc50": v} for i, v in enumerate(values)])):
        _plain(tmp_path / name, MODEL, {"refcoco_bbox_rec_val": rows})
        rep = _run(tmp_path / f"out_{name}", str(tmp_path / name), "--score-field", "acc50")
        assert rep["groups"][0]["baseline"]["accuracy"]["mean"] == pytest.approx(0.75), name


def test_heads_files_give_heatmaps_and_jaccard_overlap(mixed, tmp_path):
    plain, sweep = mixed
    rng = np.random.default_rng(0)
    files = []
    for i, model in enumerate((MODEL, OTHER, OTHER)):
        scores = rng.random((4, 6))
        path = tmp_path / f"heads_{i}.json"
        path.write_text(json.dumps({"schema": "vrh-heads/1", "model": {"id": model, "family": "qwen2_5_vl"},
                                    "geometry": {"layers": 4, "heads": 6, "kv_heads": 2, "head_dim": 8},
                                    "scoring": {}, "scores": scores.tolist(),
                                    "ranking": [str(h) for h in ranking_from_scores(scores)]}))
        files.append(path)
    rep = _run(tmp_path, str(plain), str(sweep), "--heads-files", *map(str, files), "--overlap-k", "3", "5")
    ov = rep["overlap"]
    assert ov["labels"] == ["Tiny-VLM-2B", "Other-VLM-7B (heads_1)", "Other-VLM-7B (heads_2)"]
    tops = [set(json.loads(f.read_text())["ranking"][:5]) for f in files]
    assert ov["jaccard"]["5"][0][1] == pytest.approx(len(tops[0] & tops[1]) / len(tops[0] | tops[1]))
    assert ov["jaccard"]["3"][2][2] == 1.0
    plots = rep["files"]["plots"]
    assert "plots/overlap_top5.png" in plots and sum(p.startswith("plots/heads_") for p in plots) == 3
    assert all((tmp_path / "report" / p).is_file() for p in plots)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda line: line["vrh_record"].update(status="lost"), "vrh_record.status"),
        (lambda line: line["vrh_record"].pop("correct"), "vrh_record.correct"),
        (lambda line: line.pop("doc_id"), "doc_id"),
    ],
)
def test_malformed_samples_name_the_file_and_field(tmp_path, capsys, mutate, message):
    sweep = tmp_path / "sweep"
    lines = [_grounding(i, "correct") for i in range(3)]
    mutate(lines[1])
    _sweep_config(sweep, "baseline", _vrh("baseline", "baseline", None, heads_model=None), {"t": lines})
    assert main(["report", str(sweep), "--output", str(tmp_path / "r"), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert message in err and "samples_t.jsonl:2" in err


def test_bad_vrh_block_and_duplicate_runs_are_refused(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    bad = _vrh("top4", "topk", 4)
    bad["config"]["kind"] = "sideways"
    _sweep_config(sweep, "top4", bad, {"t": [_grounding(0, "correct")]})
    assert main(["report", str(sweep), "--output", str(tmp_path / "r"), "--no-plots"]) == 2
    assert "vrh.config.kind" in capsys.readouterr().err
    # Two plain runs of one model x task are two baselines; identical ones are counted once (see the transfer
    # test below), different ones are refused. Two ablation runs of one configuration are refused either way.
    one, two = tmp_path / "one", tmp_path / "two"
    for root, status in ((one, "correct"), (two, "mislocated")):
        _plain(root, MODEL, {"t": [_grounding(0, status)]})
    assert main(["report", str(one), str(two), "--output", str(tmp_path / "r2"), "--no-plots"]) == 2
    assert "two runs of" in capsys.readouterr().err
    sweeps = (tmp_path / "s1", tmp_path / "s2")
    for root in sweeps:
        _sweep_config(root, "top4", _vrh("top4", "topk", 4), {"t": [_grounding(0, "mislocated")]})
    assert main(["report", *map(str, sweeps), "--output", str(tmp_path / "r4"), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "two runs of" in err and "top4" in err and "baselines whose outcomes differ" not in err
    assert main(["report", str(tmp_path / "nowhere"), "--output", str(tmp_path / "r3")]) == 2
    assert "not a folder" in capsys.readouterr().err


def test_documents_of_different_images_are_not_paired(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    base = [_grounding(i, "correct") for i in range(3)]
    abl = [_grounding(i, "mislocated") for i in range(3)]
    abl[2]["vrh_record"]["image_id"] = "elsewhere"
    _sweep_config(sweep, "baseline", _vrh("baseline", "baseline", None, heads_model=None), {"t": base})
    _sweep_config(sweep, "top4", _vrh("top4", "topk", 4), {"t": abl})
    assert main(["report", str(sweep), "--output", str(tmp_path / "r"), "--no-plots"]) == 2
    assert "doc_id 2" in capsys.readouterr().err


def test_pointing_records_get_their_own_taxonomy(tmp_path):
    def point(doc_id: int, status: str) -> dict:
        return {"doc_id": doc_id, "vrh_record": {"kind": "pointing", "image_id": f"i{doc_id}", "score": 1.0,
                                                 "correct": status == "correct", "status": status}}

    sweep = tmp_path / "sweep"
    _sweep_config(sweep, "baseline", _vrh("baseline", "baseline", None, heads_model=None),
                  {"refspatial": [point(i, s) for i, s in enumerate(_statuses(10, 8))]})
    _sweep_config(sweep, "top4", _vrh("top4", "topk", 4),
                  {"refspatial": [point(i, s) for i, s in enumerate(_statuses(10, 3, "parse_failure"))]})
    rep = _run(tmp_path, str(sweep))
    (group,) = rep["groups"]
    assert group["kind"] == "pointing" and group["metric"] == "acc"
    assert _cfg(group, "top4")["lost_to"] == {"mislocated": 0, "parse_failure": 5}
    assert "## Failure taxonomy (pointing)" in (tmp_path / "report" / "report.md").read_text()


def _heads_json(path: Path, model: str, scoring: dict, seed: int = 0) -> str:
    scores = np.random.default_rng(seed).random((4, 6))
    path.write_text(json.dumps({"schema": "vrh-heads/1", "model": {"id": model, "family": "qwen2_5_vl"},
                                "geometry": {"layers": 4, "heads": 6, "kv_heads": 2, "head_dim": 8},
                                "scoring": scoring, "scores": scores.tolist(),
                                "ranking": [str(h) for h in ranking_from_scores(scores)]}))
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_one_heads_file_names_the_top_k_by_its_scoring_and_has_no_overlap_matrix(tmp_path):
    heads = tmp_path / "heads.json"
    sha = _heads_json(heads, MODEL, {"query": "out", "key": "sum", "aggregate": "mean", "cell": "out,sum,mean"})
    sweep = tmp_path / "sweep"
    _sweep_config(sweep, "baseline", _vrh("baseline", "baseline", None, heads_model=None),
                  {"t": [_grounding(i, s) for i, s in enumerate(_statuses(30, 27))]})
    top = _vrh("top4", "topk", 4)
    top["ablation"]["heads_file"] = {"path": "elsewhere/heads.json", "sha256": sha, "model": MODEL}
    _sweep_config(sweep, "top4", top, {"t": [_grounding(i, s) for i, s in enumerate(_statuses(30, 12))]})
    rep = _run(tmp_path, str(sweep), "--heads-files", str(heads))
    assert rep["overlap"] is None
    assert rep["claims"][0]["heads_label"] == "top4 by out,sum,mean"
    assert rep["claims"][0]["sentence"].startswith("**top4 by out,sum,mean** on Tiny-VLM-2B / t")
    md = (tmp_path / "report" / "report.md").read_text()
    assert "Jaccard" not in md and "Head overlap" not in md
    plots = rep["files"]["plots"]
    assert not any("overlap" in p for p in plots) and sum(p.startswith("plots/heads_") for p in plots) == 1
    # The same run without the heads file: the top-k is named by its file, never by what it is hoped to be.
    rep = _run(tmp_path / "again", str(sweep))
    assert rep["claims"][0]["heads_label"] == "top4 of heads.json"


def test_pairs_are_checked_on_doc_hash_only_where_it_tells_docs_apart(tmp_path, capsys):
    base = [_grounding(i, "correct") for i in range(4)]
    abl = [_grounding(i, "mislocated") for i in range(4)]
    for line in base + abl:
        line["doc_hash"] = "same-for-all"  # lmms-eval 0.7.3: sha256 of "null" on every line
    sweep = tmp_path / "sweep"
    _sweep_config(sweep, "baseline", _vrh("baseline", "baseline", None, heads_model=None), {"t": base})
    _sweep_config(sweep, "top4", _vrh("top4", "topk", 4), {"t": abl})
    rep = _run(tmp_path, str(sweep))
    assert "doc_hash" not in rep["groups"][0]["doc_set"]["checked_on"]
    assert "vrh_record.expression" in rep["groups"][0]["doc_set"]["checked_on"]
    sweep2 = tmp_path / "sweep2"
    for i, line in enumerate(base):
        line["doc_hash"] = f"h{i}"
    for i, line in enumerate(abl):
        line["doc_hash"] = f"h{(i + 1) % 4}"  # a hashing lmms-eval: the ids point at other documents
    _sweep_config(sweep2, "baseline", _vrh("baseline", "baseline", None, heads_model=None), {"t": base})
    _sweep_config(sweep2, "top4", _vrh("top4", "topk", 4), {"t": abl})
    assert main(["report", str(sweep2), "--output", str(tmp_path / "r2"), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "doc_id 0 is not the same document" in err and "doc_hash 'h0' vs 'h1' (4 of 4 docs differ)" in err


def test_plain_target_text_pairs_with_the_sweep_target_object(tmp_path, capsys):
    """Plain lmms-eval files hold str(target), sweep files the object: the same doc either way; another box is not."""
    plain, sweep = tmp_path / "plain", tmp_path / "sweep"
    lines = [_grounding(i, "correct") | {"target": str([10.0, 20.0 + i, 30.0, 40.0])} for i in range(6)]
    _plain(plain, MODEL, {"t": lines})
    swept = [_grounding(i, "mislocated") | {"target": [10.0, 20.0 + i, 30.0, 40.0]} for i in range(6)]
    _sweep_config(sweep, "top4", _vrh("top4", "topk", 4), {"t": swept})
    rep = _run(tmp_path, str(plain), str(sweep))
    assert "target" in rep["groups"][0]["doc_set"]["checked_on"]
    swept[5]["target"] = [0.0, 0.0, 1.0, 1.0]
    other = tmp_path / "sweep_b"
    _sweep_config(other, "top4", _vrh("top4", "topk", 4), {"t": swept})
    assert main(["report", str(plain), str(other), "--output", str(tmp_path / "r2"), "--no-plots"]) == 2
    assert "doc_id 5 is not the same document" in capsys.readouterr().err


@pytest.mark.parametrize("config_id, kind, mode", [("top5_uniform_image", "topk", "uniform_image"),
                                                   ("image_matched5_s2_uniform", "image_matched", "uniform"),
                                                   ("layer_matched5_s0_mean", "layer_matched", "mean"),
                                                   ("random5_s1", "random", "zero")])
def test_mode_read_from_the_configuration_id_when_the_vrh_block_omits_it(config_id, kind, mode, tmp_path):
    from vrh_lmms.base.runfolder.runs import read_run_meta

    vrh = _vrh(config_id, kind, 5, seed=1)
    vrh["ablation"].pop("mode", None)
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"vrh": vrh}))
    meta = read_run_meta(path)
    assert (meta.kind, meta.mode) == (kind, mode)


def test_a_transfer_sweep_and_an_own_sweep_share_one_baseline(tmp_path, capsys):
    """`vrh-lmms sweep` always writes a baseline, so the model's own sweep and a sweep of another model's heads
    (same backbone, `--heads-file other.json`) both hold one: identical doc for doc, it is counted once and the
    transfer table appears; baselines whose outcomes differ are still refused, naming both folders."""
    from support.sweep_files import LineWriter, make_docs, statuses_from, vrh_block

    rng = np.random.default_rng(3)
    docs = make_docs(rng, n_images=40, sizes=(1, 3))
    writer = LineWriter(docs)
    base = rng.random(len(docs)) < 0.9
    base_statuses = statuses_from(base, rng, 0.0)
    own, transfer = tmp_path / "sweep_own", tmp_path / "sweep_from_other"
    for root in (own, transfer):
        writer.write(root, "baseline", vrh_block("baseline", "baseline", None, None), base_statuses)
    writer.write(own, "top2", vrh_block("top2", "topk", 2, None), statuses_from(base & (rng.random(len(docs)) < 0.4),
                                                                             rng, 0.0))
    writer.write(own, "random2_s0", vrh_block("random2_s0", "random", 2, 0), base_statuses)
    writer.write(transfer, "top2", vrh_block("top2", "topk", 2, None, heads_model=OTHER),
                 statuses_from(base & (rng.random(len(docs)) < 0.6), rng, 0.0))
    rep = _run(tmp_path, str(own), str(transfer))
    assert any("repeats the one in" in w and "counted once" in w for w in rep["warnings"])
    (row,) = rep["transfer"]
    assert row["heads_from"] == OTHER and row["own"] is not None
    assert "## Cross-model transfer of heads" in (tmp_path / "report" / "report.md").read_text()

    other_base = list(base_statuses)
    other_base[0] = "mislocated" if other_base[0] == "correct" else "correct"
    (transfer / "configs" / "baseline").rename(tmp_path / "old_baseline")
    writer.write(transfer, "baseline", vrh_block("baseline", "baseline", None, None), other_base)
    assert main(["report", str(own), str(transfer), "--output", str(tmp_path / "r2"), "--n-resamples", "200"]) == 2
    err = capsys.readouterr().err
    assert "baselines whose outcomes differ" in err and "sweep_own" in err and "sweep_from_other" in err


def _found_on(config_id: str, kind: str, k, task: str, evidence: str, seed=None) -> dict:
    """A run whose heads file records its discovery task and evidence kind (heads_file.describe since issue 29)."""
    vrh = _vrh(config_id, kind, k, seed)
    vrh["ablation"]["heads_file"] |= {"task": task, "evidence": evidence}
    return vrh


def test_heads_found_on_another_task_are_a_cross_ablation_beside_the_tasks_own_heads(tmp_path):
    """Text-needle heads and grounding heads, each ablated on both tasks: on each task the other task's top-k is
    labelled `@task:<its discovery task>` and sits in the transfer table beside the task's own top-k; a task with
    no run of its own heads keeps the plain label (the paper's grounding heads ablated on VQA)."""
    base_n = [_vqa(i, s) for i, s in enumerate(_statuses(20, 12, "wrong"))]
    base_g = [_grounding(i, s) for i, s in enumerate(_statuses(30, 27))]
    needle, grounding = tmp_path / "sweep_needle_heads", tmp_path / "sweep_grounding_heads"
    _sweep_config(needle, "baseline", _vrh("baseline", "baseline", None), {"task_n": base_n, "task_g": base_g})
    _sweep_config(needle, "top4", _found_on("top4", "topk", 4, "task_n", "text"), {
        "task_n": [_vqa(i, s) for i, s in enumerate(_statuses(20, 2, "wrong"))],
        "task_g": [_grounding(i, s) for i, s in enumerate(_statuses(30, 25))]})
    _sweep_config(grounding, "top4", _found_on("top4", "topk", 4, "task_g", "box"), {
        "task_n": [_vqa(i, s) for i, s in enumerate(_statuses(20, 11, "wrong"))],
        "task_g": [_grounding(i, s) for i, s in enumerate(_statuses(30, 6))]})
    rep = _run(tmp_path, str(needle), str(grounding))
    n, g = _group(rep, "task_n"), _group(rep, "task_g")
    assert _cfg(n, "top4")["accuracy"]["mean"] == pytest.approx(2 / 20)
    assert _cfg(n, "top4@task:task_g")["accuracy"]["mean"] == pytest.approx(11 / 20)
    assert _cfg(g, "top4")["accuracy"]["mean"] == pytest.approx(6 / 30)
    assert _cfg(g, "top4@task:task_n")["accuracy"]["mean"] == pytest.approx(25 / 30)
    rows = {(r["task"], r["heads_from"]): r for r in rep["transfer"]}
    assert set(rows) == {("task_n", "task:task_g"), ("task_g", "task:task_n")}
    assert rows["task_n", "task:task_g"]["own"]["drop"] == pytest.approx(10 / 20)
    assert rows["task_n", "task:task_g"]["transferred"]["drop"] == pytest.approx(1 / 20)
    assert "| task_n | top4 | task:task_g |" in (tmp_path / "report" / "report.md").read_text()

    alone = tmp_path / "alone"
    alone.mkdir()
    rep = _run(alone, str(grounding), str(needle / "configs" / "baseline"))
    alone_n = _group(rep, "task_n")
    assert {c["label"] for c in alone_n["configs"]} == {"top4"} and alone_n["baseline"] is not None
    assert not rep["transfer"]
