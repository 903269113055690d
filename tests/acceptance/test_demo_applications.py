"""`vrh-lmms demo --applications`: the locator and the ranker run on the demo's own heads file, each through its
command into applications/, and applications.md states each one's headline figures exactly as their files hold
them (small settings: 12 evaluation scenes, 8 ranker queries, 2 draws)."""

from __future__ import annotations

import json

import pytest

from vrh_lmms.cli import main


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("apps") / "demo"
    assert main(["demo", "--output", str(out), "--n-eval", "12", "--random-seeds", "2", "--k", "5,9", "--no-recall",
                 "--applications", "--n-queries", "8", "--n-train", "6"]) == 0
    return out


def test_applications_summary_reads_the_commands_own_files(demo):
    folder = demo / "applications"
    locate = json.loads((folder / "locate" / "locate.json").read_text())
    rank = json.loads((folder / "rank" / "rank.json").read_text())
    assert locate["heads_file"] == str((demo / "heads.json").resolve()) == rank["heads_file"]
    assert locate["n_docs"] == 12 and rank["n_queries"] == 8 and rank["ks"] == [5, 9]
    text = (folder / "applications.md").read_text()
    for row in locate["rows"]:
        top = row["topk"]
        assert (f"top-{row['k']} {100 * top['mean']:.1f} [{100 * top['ci_low']:.1f}, {100 * top['ci_high']:.1f}] "
                f"(random-{row['k']} {100 * row['random']['mean']:.1f})") in text
    cal = rank["results"]["calibrated"]
    for row in cal["rows"]:
        r1 = row["topk"]["recall@1"]
        assert f"top-{row['k']} {100 * r1['mean']:.1f} [{100 * r1['ci_low']:.1f}" in text
    assert f"all {cal['n_all']} live heads {100 * cal['all']['recall@1']['mean']:.1f}" in text
    kv = json.loads((folder / "kv_cache" / "kv_cache.json").read_text())
    smallest = min(r["budget"] for r in kv["rows"])
    for row in kv["rows"]:
        if row["budget"] == smallest:
            assert f"{row['policy']} {100 * row['accuracy']['mean']:.1f} [{100 * row['accuracy']['ci_low']:.1f}" in text
    # ranking-loss training: each trained checkpoint ranked again with the same heads and queries
    for name in ("top", "random"):
        trained = json.loads((folder / "rank_train" / f"rank_{name}_heads" / "rank.json").read_text())
        assert trained["n_queries"] == rank["n_queries"] and trained["heads_file"] == rank["heads_file"]
        r1 = trained["results"]["calibrated"]["rows"][0]["topk"]["recall@1"]
        assert f"after training the {name} heads {100 * r1['mean']:.1f} [{100 * r1['ci_low']:.1f}" in text
        record = json.loads((folder / "rank_train" / f"{name}_heads" / "rank_train.json").read_text())
        assert '"scene_start": 200000' in json.dumps(record)  # scenes disjoint from the evaluation ones
    # the demo's own files are untouched by the applications, and the folder is one a rerun may replace
    assert (demo / "demo_summary.md").is_file()
    assert main(["demo", "--output", str(demo), "--n-eval", "12", "--random-seeds", "2", "--k", "5,9"]) == 2
