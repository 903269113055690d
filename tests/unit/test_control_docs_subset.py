"""`--control-docs N` pieces without a model: which configurations are controls, the subset drawn from the docs an
evaluator pass reads (limit, offset) as whole images (image_subsample's, mapped to the dataset's doc ids), the
request filter of `restrict_docs`, and bad values refused in one line before any model loads."""

from __future__ import annotations

import datasets
import pytest

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.plan import plan_configurations
from vrh_lmms.base.stats.subsample import image_subsample
from vrh_lmms.harness import doc_subset
from vrh_lmms.runs.sweep.control_docs import check_control_docs, draw, is_control

IMAGES = ["a", "a", "b", "c", "c", "c", "d", "e", "e", "f", "g", "g"]


def test_controls_are_the_draws_not_baseline_topk_or_cells():
    configs = plan_configurations([2], 1, True, ["zero", "mean"], controls=["image-matched", "random-outside"],
                                  uniform_random=True, cells=["in,sum,mean"])
    kinds = {c.kind for c in configs if is_control(c)}
    assert kinds == {"random", "random_all", "layer_matched", "image_matched", "random_outside"}
    assert {c.kind for c in configs if not is_control(c)} == {"baseline", "topk", "scorer_topk"}


class _Leaf:
    def __init__(self, rows):
        self.eval_docs_no_media = datasets.Dataset.from_list(rows)
        self.eval_docs = self.eval_docs_no_media


@pytest.mark.parametrize("limit,offset", [(None, 0), (None, 2), (8, 2), (0.5, 0)])
def test_subset_is_image_subsample_of_the_docs_a_pass_reads(monkeypatch, limit, offset):
    leaf = _Leaf([{"image_id": img, "q": i} for i, img in enumerate(IMAGES)])
    monkeypatch.setattr(doc_subset, "leaf_tasks", lambda tm, task: iter([(task, leaf)]))
    images = doc_subset.doc_images(None, ["t"], limit, {"t": offset} if offset else None)
    stop = len(IMAGES) if limit is None else min(len(IMAGES), offset + (limit if limit >= 1 else 6))
    read = list(range(offset, stop))
    assert images == {"t": (read, [IMAGES[i] for i in read])}
    subset = draw(images, 4, seed=3)
    want = [read[i] for i in image_subsample([IMAGES[i] for i in read], 4, seed=3)]
    assert subset.tasks == {"t": want}
    chosen = {IMAGES[i] for i in want}
    assert [i for i in read if IMAGES[i] in chosen] == want  # whole images: every doc of a chosen image
    assert subset.counts["t"] == {"n_docs": len(want), "n_images": len(chosen), "all_docs": len(read),
                                  "all_images": len(set(IMAGES[i] for i in read))}


def test_docs_without_image_ids_are_their_own_images(monkeypatch):
    leaf = _Leaf([{"q": i} for i in range(5)])
    monkeypatch.setattr(doc_subset, "leaf_tasks", lambda tm, task: iter([(task, leaf)]))
    assert doc_subset.doc_images(None, ["t"]) == {"t": (list(range(5)), [f"doc:{i}" for i in range(5)])}


def test_restrict_docs_keeps_the_requests_of_the_subset_only():
    from lmms_eval.api.task import Task

    class Inst:
        def __init__(self, doc_id):
            self.doc_id = doc_id

    class Fake:
        def __init__(self, name):
            self.config = type("C", (), {"task": name})()

    def build(self, **kwargs):
        self._instances = [Inst(i) for i in range(6)]

    original = Task.build_all_requests
    Task.build_all_requests = build
    try:
        with doc_subset.restrict_docs({"t": [1, 4]}):
            mine, other = Fake("t"), Fake("u")
            Task.build_all_requests(mine)
            Task.build_all_requests(other)
        assert [i.doc_id for i in mine._instances] == [1, 4]
        assert [i.doc_id for i in other._instances] == list(range(6))
        assert Task.build_all_requests is build  # restored
    finally:
        Task.build_all_requests = original
    results = {"n-samples": {"t": {"original": 6, "effective": 6}, "u": {"original": 6, "effective": 6}}}
    doc_subset.count_subset(results, {"t": [1, 4]})
    assert results["n-samples"] == {"t": {"original": 6, "effective": 2}, "u": {"original": 6, "effective": 6}}


@pytest.mark.parametrize("bad", [0, -3])
def test_bad_control_docs_is_one_line(bad):
    with pytest.raises(VRHError, match=f"--control-docs {bad}: expected a positive number"):
        check_control_docs(bad)
    assert check_control_docs(None) is None and check_control_docs(5) == 5


def test_cli_refuses_bad_control_docs_before_any_model_loads(tmp_path, capsys):
    from vrh_lmms.cli import main

    assert main(["sweep", "--model", "vrh_qwen25", "--model_args", "pretrained=/nonexistent", "--tasks",
                 "vrh_synth_grounding", "--control-docs", "0", "--no-random", "--k", "1",
                 "--output", str(tmp_path / "o")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--control-docs 0" in err[0], err
    assert main(["replicate", "--demo", "--control-docs", "0", "--output", str(tmp_path / "r")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--control-docs 0" in err[0], err


def test_cli_passes_control_docs_to_the_sweep(monkeypatch, tmp_path):
    from vrh_lmms.cli import main
    from vrh_lmms.cli.commands import sweep

    seen = []
    monkeypatch.setattr(sweep, "run_sweep", lambda spec, output, force=False: seen.append(spec) or tmp_path)
    args = ["sweep", "--model", "vrh_qwen25", "--model_args", "pretrained=x", "--tasks", "vrh_synth_grounding",
            "--k", "1", "--output", str(tmp_path / "o")]
    assert main(args + ["--control-docs", "2000"]) == 0
    assert main(args) == 0
    assert [s.control_docs for s in seen] == [2000, None]
    assert seen[0].identity(None)["control_docs"] == 2000 and "control_docs" not in seen[1].identity(None)


def test_a_subset_of_one_image_is_refused():
    with pytest.raises(VRHError, match="--control-docs 2: the subset of t holds one image"):
        draw({"t": ([0, 1, 2, 3], ["a", "a", "a", "b"])}, 2, seed=0)
    assert draw({"t": ([0, 1, 2, 3], ["a", "a", "a", "b"])}, 4, seed=0).tasks == {"t": [0, 1, 2, 3]}


def test_drop_plot_draws_a_drop_whose_interval_is_null(tmp_path):
    from vrh_lmms.report import plots

    group = {"model": "m", "task": "t", "metric": "acc", "configs": [
        {"label": "random1_s0", "kind": "random", "drop": {"drop": 0.1, "ci_low": None, "ci_high": None}},
        {"label": "top1", "kind": "topk", "drop": {"drop": 0.3, "ci_low": 0.2, "ci_high": 0.4}}]}
    assert plots.drop_plot(group, tmp_path / "d.png").is_file()
