"""`vrh-lmms sweep --control-docs N`: the control draws run on a seeded image subset of the docs, the baseline and
the top-k on all of them.

On a tiny Qwen2.5-VL (float32, CPU) with both engines: the subset is exactly `image_subsample`'s on the docs' image
ids; each control's files equal lmms-eval's own evaluator on the task whose dataset holds only those docs (doc ids
mapped back to the dataset's); the report compares a control's drop with the baseline on the subset, with
`subsample_drop` computed by hand from the samples files, and says so on its first lines; a rerun with another N is
refused before the model loads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.heads_file import HeadsFile, load_heads_file, ranking_from_scores, save_heads_file
from vrh_lmms.base.heads.plan import plan_configurations
from vrh_lmms.base.heads.spec import resolve_spec
from vrh_lmms.base.stats.subsample import image_subsample, subsample_drop
from vrh_lmms.harness import lmms
from vrh_lmms.runs.sweep.run import SweepSpec, run_sweep

PIXELS = 28 * 28 * 16
TASK = "vrh_synth_grounding"
N_DOCS, SUBSET, SEED = 6, 3, 1
GEN = "max_new_tokens=8"
TIMES = ("date", "start_time", "end_time", "total_evaluation_time_seconds")
CONTROLS = ("random1_s0", "random1_s1")


@pytest.fixture(scope="module")
def setting(tiny_qwen25, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("control_docs")
    mp = pytest.MonkeyPatch()
    mp.setenv("VRH_CACHE_DIR", str(tmp / "cache"))
    mp.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": N_DOCS, "seed": 4}))
    args = f"pretrained={tiny_qwen25},dtype=float32,min_pixels={PIXELS},max_pixels={PIXELS}"
    lm = lmms.build_model("vrh_qwen25", args, batch_size=1)
    g = lm.vrh_decoder.geometry
    scores = np.random.default_rng(2).random((g.layers, g.heads))
    heads = tmp / "heads.json"
    save_heads_file(HeadsFile({"id": str(tiny_qwen25), "family": "qwen2_5_vl"}, g, scores,
                              ranking_from_scores(scores)), heads)
    yield tmp, lm, args, heads
    mp.undo()


def _spec(args, heads, engine, n=SUBSET):
    return SweepSpec("vrh_qwen25", args, [TASK], str(heads), plan_configurations([1], 2, False, ["zero"]),
                     gen_kwargs=GEN, seed=SEED, engine=engine, control_docs=n)


def _lines(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / f"samples_{TASK}.jsonl").read_text().splitlines()]


def _results(folder: Path) -> dict:
    data = json.loads((folder / "results.json").read_text())
    for key in TIMES:
        data.pop(key, None)
    for key in ("avg_speed", "total_elapsed_time"):
        data.get("throughput", {}).pop(key, None)
    return data


def _renumbered(row: dict, ids: list[int]) -> dict:
    """A sample line of the restricted task under the dataset's doc id (`doc_id`, and the request's own copy of it,
    the third of `arguments`)."""
    args = list(row["arguments"])
    assert args[2] == row["doc_id"]
    args[2] = ids[row["doc_id"]]
    return dict(row, doc_id=ids[row["doc_id"]], arguments=args)


def handle_non_serializable(o):
    from lmms_eval.utils import handle_non_serializable as handle

    return handle(o)


def _restricted_reference(lm, ids: list[int]) -> dict:
    """lmms-eval's evaluator on the task whose dataset holds only the docs `ids` (in that order)."""
    from lmms_eval import evaluator

    original = evaluator.get_task_dict

    def select(*a, **k):
        tasks = original(*a, **k)
        for task in tasks.values():
            split = task.config.test_split or task.config.validation_split
            task.dataset[split] = task.dataset[split].select(ids)
            if getattr(task, "dataset_no_image", None) is not None:
                task.dataset_no_image[split] = task.dataset_no_image[split].select(ids)
        return tasks

    evaluator.get_task_dict = select
    try:
        return lmms.evaluate(lm, [TASK], lmms.task_manager("vrh_qwen25", tasks=[TASK]), gen_kwargs=GEN, seed=SEED)
    finally:
        evaluator.get_task_dict = original


@pytest.mark.parametrize("engine", ["fast", "lmms"])
def test_controls_run_on_the_image_subset_and_match_lmms_eval(setting, engine):
    tmp, lm, args, heads = setting
    packs, original_pack = [], lm.vrh_pack

    def keeping_pack(*a, **kw):
        packs.append(original_pack(*a, **kw))
        return packs[-1]

    lm.vrh_pack = keeping_pack
    try:
        out = run_sweep(_spec(args, heads, engine), tmp / engine, lm=lm, progress=False)
    finally:
        del lm.vrh_pack
    # baseline + top1 packed on every doc, the two controls in a pack of their own on the subset's docs only
    assert [sum(p.stats.rows) for p in packs] == [2 * N_DOCS, 2 * SUBSET]

    tm = lmms.task_manager("vrh_qwen25", tasks=[TASK])
    images = [str(doc["image_id"]) for _, _, doc in lmms.eval_docs(tm, [TASK])]
    want = [int(i) for i in image_subsample(images, SUBSET, seed=SEED)]
    manifest = json.loads((out / "sweep.json").read_text())
    assert manifest["control_docs"]["tasks"][TASK]["doc_ids"] == want
    assert manifest["identity"]["control_docs"] == SUBSET
    for cfg in ("baseline", "top1"):
        assert [s["doc_id"] for s in _lines(out / "configs" / cfg)] == list(range(N_DOCS))
    for cfg in CONTROLS:
        folder = out / "configs" / cfg
        assert [s["doc_id"] for s in _lines(folder)] == want
        results = _results(folder)
        assert results["vrh"]["doc_subset"]["tasks"][TASK]["doc_ids"] == want
        headset = resolve_spec("random1", lm.vrh_decoder.geometry, heads_file=load_heads_file(heads),
                               seed=int(cfg[-1]), dead=tuple(lm.vrh_dead_heads or ()))
        assert results["vrh"]["ablation"]["heads"] == [str(h) for h in headset.heads]
        lm.vrh_apply(headset, mode="zero")
        try:
            reference = _restricted_reference(lm, want)
        finally:
            lm.vrh_apply(resolve_spec("none", lm.vrh_decoder.geometry))
        ref_lines = [_renumbered(row, want) for row in reference["samples"][TASK]]
        assert json.loads(json.dumps(ref_lines, default=handle_non_serializable)) == _lines(folder), cfg
        ref = json.loads(json.dumps({k: v for k, v in reference.items() if k != "samples"},
                                    default=handle_non_serializable))
        for key in TIMES:
            ref.pop(key, None)
        for key in ("avg_speed", "total_elapsed_time"):
            ref.get("throughput", {}).pop(key, None)
        # the one field that differs: the restricted task has SUBSET docs, the sweep's the task's N_DOCS
        assert ref["n-samples"][TASK] == {"original": SUBSET, "effective": SUBSET}
        assert results["n-samples"][TASK] == {"original": N_DOCS, "effective": SUBSET}
        ref["n-samples"], results["n-samples"] = {}, {}
        results.pop("vrh")
        assert sorted(ref) == sorted(results)
        for key in ref:
            assert results[key] == ref[key], (cfg, key)


def test_report_pairs_controls_with_the_baseline_on_the_subset(setting):
    from vrh_lmms.cli import main

    tmp, lm, args, heads = setting
    out = tmp / "fast"
    if not (out / "sweep.json").is_file():
        run_sweep(_spec(args, heads, "fast"), out, lm=lm, progress=False)
    assert main(["report", str(out), "--output", str(tmp / "report"), "--no-plots"]) == 0
    report = json.loads((tmp / "report" / "report.json").read_text())
    group = report["groups"][0]
    base = {s["doc_id"]: s["vrh_record"] for s in _lines(out / "configs" / "baseline")}
    all_images = [base[d]["image_id"] for d in sorted(base)]
    for cfg in CONTROLS:
        rows = _lines(out / "configs" / cfg)
        by_hand = subsample_drop([float(base[s["doc_id"]]["correct"]) for s in rows],
                                 [float(s["vrh_record"]["correct"]) for s in rows],
                                 [s["vrh_record"]["image_id"] for s in rows], all_images)
        block = next(c for c in group["configs"] if c["config_id"] == cfg)
        assert block["drop"]["drop"] == pytest.approx(by_hand.drop, abs=1e-12)
        assert [block["drop"]["ci_low"], block["drop"]["ci_high"]] == pytest.approx(
            [by_hand.ci_low, by_hand.ci_high], abs=1e-12, nan_ok=True)
        assert block["drop"]["subset"]["ci_docs_low"] == pytest.approx(by_hand.ci_docs_low, abs=1e-12, nan_ok=True)
        assert block["paired"]["n_paired"] == SUBSET
    top = next(c for c in group["configs"] if c["config_id"] == "top1")
    assert top["paired"]["n_paired"] == N_DOCS
    sub = group["doc_set"]["control_docs"]
    assert (sub["n_docs"], sub["all_docs"], sub["asked"], sub["seed"], sub["n_configs"]) == (
        SUBSET, N_DOCS, SUBSET, SEED, 2)
    head = (tmp / "report" / "report.md").read_text().splitlines()[:4]
    assert any(f"Control draws ran on {SUBSET} of {N_DOCS} docs" in line for line in head), head


def test_another_subset_size_is_refused_before_the_model_loads(setting):
    tmp, lm, args, heads = setting
    out = tmp / "fast"
    if not (out / "sweep.json").is_file():
        run_sweep(_spec(args, heads, "fast"), out, lm=lm, progress=False)
    with pytest.raises(VRHError, match="control_docs"):
        run_sweep(_spec(args, heads, "fast", n=4), out, progress=False)  # no lm: refused before any load
    with pytest.raises(VRHError, match="control_docs"):
        run_sweep(_spec(args, heads, "fast", n=None), out, progress=False)
    with pytest.raises(VRHError, match="--control-docs 0"):
        run_sweep(_spec(args, heads, "fast", n=0), tmp / "zero", progress=False)
