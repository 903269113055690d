"""`vrh-lmms kv-cache` end to end on the shipped demo model (in process, a handful of held-out scenes): the files,
the table recomputed from the run folders, budget-1 rows equal to no compression, compress mode answering exactly
like mask mode, refusals of bad input and of another run's result, and nothing redone for the same run."""

from __future__ import annotations

import json

import numpy as np
import pytest
from support.demo_runs import demo_heads_on_eval_scenes

from vrh_lmms.base.paths import assets_path

MODEL = assets_path() / "demo_model"
pytestmark = pytest.mark.skipif(not (MODEL / "config.json").is_file(), reason="no shipped demo model")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from vrh_lmms.cli import main

    tmp = tmp_path_factory.mktemp("kv")
    mp = pytest.MonkeyPatch()
    common, heads = demo_heads_on_eval_scenes(tmp, mp)
    kv = [*common, "--heads-file", str(heads), "--budgets", "1,0.25", "--random-seeds", "2", "--k", "3"]
    for mode in ("mask", "compress"):
        assert main(["kv-cache", *kv, "--mode", mode, "--output", str(tmp / mode)]) == 0
    tmp_common = (kv, main)
    yield tmp, tmp_common
    mp.undo()


def _answers(folder):
    lines = (folder / "samples_vrh_synth_grounding.jsonl").read_text().splitlines()
    return [json.loads(line)["resps"] for line in lines]


def test_table_and_files(runs):
    from vrh_lmms.base.runfolder.samples import read_samples

    tmp, _ = runs
    out = tmp / "mask"
    data = json.loads((out / "kv_cache.json").read_text())
    assert data["schema"] == "vrh-kv-cache/1" and data["n_docs"] == 6
    assert (out / "kv_cache.png").stat().st_size > 5_000 and "| retrieval |" in (out / "kv_cache.md").read_text()
    rows = {(r["policy"], r["budget"]): r for r in data["rows"]}
    budgets = sorted({b for _, b in rows}, reverse=True)
    assert budgets[0] == 1.0 and 0.25 in budgets and len(budgets) == 3  # 1, the top-3 heads' budget, 0.25
    for policy in ("retrieval", "random", "uniform"):
        assert rows[(policy, 1.0)]["accuracy"] == rows[("none", 1.0)]["accuracy"]
        r = rows[(policy, 0.25)]
        runs_ = [read_samples(out / "runs" / name / "samples_vrh_synth_grounding.jsonl").scores for name in r["runs"]]
        assert r["accuracy"]["mean"] == pytest.approx(np.mean(runs_))
        assert r["cache"]["image_kv_kept"] == pytest.approx(0.25, abs=0.03)
        assert r["cache"]["kv_bytes_kept"] < r["cache"]["kv_bytes_full"]
    assert len(rows[("random", 0.25)]["runs"]) == 2 and len(rows[("random", 0.25)]["per_seed"]) == 2


def test_compress_answers_like_mask(runs):
    tmp, _ = runs
    mask, comp = (json.loads((tmp / m / "kv_cache.json").read_text()) for m in ("mask", "compress"))
    for a, b in zip(mask["rows"], comp["rows"]):
        for name in a["runs"]:
            assert _answers(tmp / "mask" / "runs" / name) == _answers(tmp / "compress" / "runs" / name), name
        assert a["cache"].get("kv_bytes_physical") == b["cache"].get("kv_bytes_physical")
        if b["cache"]:  # the compressed cache holds exactly the bytes claimed
            c = b["cache"]
            assert c["cache_bytes_after"] == c["kv_bytes_physical"] == c["cache_bytes_claimed"]
    uniform = next(r for r in comp["rows"] if r["policy"] == "uniform" and r["budget"] < 1)
    assert uniform["cache"]["cache_bytes_after"] < uniform["cache"]["kv_bytes_full"]


def test_refusals(runs, capsys):
    from vrh_lmms.base.errors import VRHError

    tmp, (kv, main) = runs
    before = (tmp / "mask" / "kv_cache.json").read_text()
    assert main(["kv-cache", *kv, "--output", str(tmp / "mask")]) == 0  # the same run, finished: nothing to do
    assert "already holds this kv-cache run" in " ".join(capsys.readouterr().err.split())  # wrapped by the console
    assert main(["kv-cache", *kv, "--random-seeds", "1", "--output", str(tmp / "mask")]) == 2  # another run
    assert "(random_seeds differ)" in capsys.readouterr().err
    assert (tmp / "mask" / "kv_cache.json").read_text() == before
    one = [*kv[:-6], "--budgets", "1", "--random-seeds", "0", "--output", str(tmp / "force")]
    assert main(["kv-cache", *one]) == 0
    (tmp / "force" / "kv_cache.md").write_text("edited")
    assert main(["kv-cache", *one, "--force"]) == 0  # our earlier result replaced, nothing else touched
    assert (tmp / "force" / "kv_cache.md").read_text().startswith("# KV cache")
    (tmp / "force" / "notes.txt").write_text("mine")
    assert main(["kv-cache", *one, "--force"]) == 2  # a foreign file: refused even with --force
    assert (tmp / "force" / "notes.txt").read_text() == "mine"
    assert main(["kv-cache", *kv[:-6], "--budgets", "1,1.5", "--output", str(tmp / "bad")]) == 2
    assert "outside 0..1" in capsys.readouterr().err
    args = list(kv)
    args[args.index("--model_args") + 1] += ",heads=top3"  # an ablation would confound the KV policies
    assert main(["kv-cache", *args, "--output", str(tmp / "bad")]) == 2
    assert "heads=top3 is not allowed in `vrh-lmms kv-cache`" in capsys.readouterr().err
    from vrh_lmms.runs.kvcache.run import parse_budgets

    with pytest.raises(VRHError, match="--budgets"):
        parse_budgets("a,b")
    assert parse_budgets("0.1,1,0.5") == [1.0, 0.5, 0.1]
