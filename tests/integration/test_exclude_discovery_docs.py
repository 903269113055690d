"""The paper's disjoint evaluation (Table A10): a sweep with --exclude-discovery-docs leaves out exactly the docs the
heads file was found on, keeps the dataset's doc ids (so its answers are the ones a plain sweep gives on those docs),
evaluates tasks discovery did not use whole (two evaluator passes merged), records what it left out in sweep.json,
each run and the report; `--preset paper` fills the paper's k grid, controls and exclusion; bad input is refused in
one line."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.heads_file import load_heads_file, save_heads_file

PIXELS = 224 * 224
TASK = "vrh_synth_grounding"


@pytest.fixture(scope="module")
def setting(tiny_qwen25, tmp_path_factory):
    """A real discovery on the first 3 of 6 synthetic scenes, and the environment its sweeps use."""
    from vrh_lmms.cli import main

    tmp = tmp_path_factory.mktemp("exclude")
    mp = pytest.MonkeyPatch()
    mp.setenv("VRH_CACHE_DIR", str(tmp / "cache"))
    mp.setenv("VRH_HEADS_REGISTRY", str(tmp / "registry.json"))
    mp.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 6, "seed": 4}))
    args = f"pretrained={tiny_qwen25},dtype=float32,min_pixels={PIXELS},max_pixels={PIXELS}"
    heads = tmp / "d" / "heads.json"
    assert main(["discover", "--model", "vrh_qwen25", "--model_args", args, "--tasks", TASK, "--limit", "3",
                 "--gen-kwargs", "max_new_tokens=6", "--output", str(heads)]) == 0
    yield tmp, heads, args
    mp.undo()


def _sweep(args, heads, out, *extra):
    from vrh_lmms.cli import main

    return main(["sweep", "--model", "vrh_qwen25", "--model_args", args, "--heads-file", str(heads),
                 "--gen-kwargs", "max_new_tokens=6", "--output", str(out), *extra])


def _rows(out, config, task=TASK):
    lines = (out / "configs" / config / f"samples_{task}.jsonl").read_text().splitlines()
    return {json.loads(line)["doc_id"]: json.loads(line)["filtered_resps"] for line in lines}


def test_heads_file_names_its_docs_and_the_sweep_leaves_them_out(setting):
    tmp, heads, args = setting
    hf = load_heads_file(heads)
    assert hf.extra["discovery_docs"] == {TASK: {"split": "test", "doc_ids": [0, 1, 2]}}

    plain, disjoint = tmp / "plain", tmp / "disjoint"
    assert _sweep(args, heads, plain, "--tasks", TASK, "--k", "1", "--no-random") == 0
    assert _sweep(args, heads, disjoint, "--tasks", f"{TASK},vrh_synth_vqa", "--k", "1", "--no-random",
                  "--exclude-discovery-docs") == 0
    for config in ("baseline", "top1"):
        kept = _rows(disjoint, config)
        assert sorted(kept) == [3, 4, 5]  # the dataset's own doc ids, the first three left out
        whole = _rows(plain, config)
        assert kept == {d: whole[d] for d in (3, 4, 5)}  # the same answers a plain sweep gives on those docs
        assert sorted(_rows(disjoint, config, "vrh_synth_vqa")) == list(range(6))  # not used by discovery: whole
        results = json.loads((disjoint / "configs" / config / "results.json").read_text())
        assert set(results["results"]) >= {TASK, "vrh_synth_vqa"}  # two evaluator passes, one results file
        assert results["vrh"]["excluded_docs"]["tasks"] == {TASK: {"first_doc": 3}}
    manifest = json.loads((disjoint / "sweep.json").read_text())
    assert manifest["excluded_docs"]["tasks"] == {TASK: {"first_doc": 3}}
    assert manifest["identity"]["excluded_docs"] == {TASK: 3}
    assert "excluded_docs" not in json.loads((plain / "sweep.json").read_text())

    from vrh_lmms.cli import main

    assert main(["report", str(disjoint), "--output", str(tmp / "report")]) == 0
    md = (tmp / "report" / "report.md").read_text()
    assert f"/ {TASK}: every number uses the same 3 docs" in md
    assert "(docs 0-2, which discovery used, left out)" in md


def test_refusals_name_the_bad_part(setting, tmp_path, capsys):
    _, heads, args = setting

    def refused(out, heads_file, tasks, match):
        assert _sweep(args, heads_file, tmp_path / out, "--tasks", tasks, "--k", "1", "--no-random",
                      "--exclude-discovery-docs") == 2
        err = capsys.readouterr().err
        assert re.search(match, err) and err.count("\n") == 1, err
        assert not (tmp_path / out).exists()  # refused before anything was written

    refused("a", heads, "vrh_synth_vqa", "discovery used vrh_synth_grounding, which this sweep does not evaluate")
    # a heads file that does not say which docs, with no samples file beside it
    hf = load_heads_file(heads)
    hf.extra.pop("discovery_docs")
    bare = save_heads_file(hf, tmp_path / "bare" / "heads.json")
    refused("b", bare, TASK, "does not say which docs discovery used")
    # docs that are not a prefix cannot be left out by an offset
    hf.extra["discovery_docs"] = {TASK: {"split": "test", "doc_ids": [0, 2]}}
    gappy = save_heads_file(hf, tmp_path / "gappy" / "heads.json")
    refused("c", gappy, TASK, r"not its first 2 \(e\.g\. doc 2\)")
    with pytest.raises(VRHError, match="--preset 'nope': use one of paper, paper_a9"):
        from vrh_lmms.runs.protocol import SWEEP_PRESETS, resolve

        resolve(SWEEP_PRESETS, "nope", {"k": None})


def test_samples_file_is_the_fallback_for_older_heads_files(setting, tmp_path):
    from vrh_lmms.runs.sweep.exclusion import discovery_docs

    _, heads, _ = setting
    hf = load_heads_file(heads)
    recorded = discovery_docs(hf)
    hf.extra.pop("discovery_docs")
    assert discovery_docs(hf) == recorded == {TASK: [0, 1, 2]}  # read from heads.samples.npz beside it
    keys = np.load(heads.parent / hf.scoring["samples_file"])["keys"]
    assert sorted(keys) == [f"{TASK}__test__{i}" for i in range(3)]


def test_paper_preset_fills_what_the_command_line_leaves_unset(setting, tmp_path):
    tmp, heads, args = setting
    out = tmp_path / "paper"
    assert _sweep(args, heads, out, "--tasks", TASK, "--preset", "paper", "--k", "1", "--random-seeds", "1") == 0
    manifest = json.loads((out / "sweep.json").read_text())
    ids = [c["id"] for c in manifest["configurations"]]
    assert ids == ["baseline", "top1", "random1_s0", "random_outside1_s0"]  # --k given: it wins over 1,3,5,10,20
    assert manifest["control_pool"] == "live" and manifest["preset"] == "paper"
    assert manifest["excluded_docs"]["tasks"] == {TASK: {"first_doc": 3}}
    assert sorted(_rows(out, "random_outside1_s0")) == [3, 4, 5]


def test_scorer_comparison_masks_each_cells_top_k_and_the_report_compares_them(setting, tmp_path, capsys):
    """Fig 2/3 as one sweep: each compared cell's top-k is exactly that cell's ranking in the heads file; presets
    sharing a cell are masked once; the report's table reads the runs' own accuracies and draws one plot."""
    from vrh_lmms.cli import main

    _, heads, args = setting
    out = tmp_path / "scorers"
    assert _sweep(args, heads, out, "--tasks", TASK, "--k", "1,2", "--random-seeds", "2", "--compare-cells",
                  "fig3") == 0
    hf = load_heads_file(heads)
    ids = [c["id"] for c in json.loads((out / "sweep.json").read_text())["configurations"]]
    # vera is the primary cell (out,sum,mean: the plain top-k); retrieval_heads and ocr_heads share out,argmax,mean
    assert [i for i in ids if i.startswith("scorer_")] == [
        f"scorer_{c}_top{k}" for k in (1, 2) for c in ("out-argmax-mean", "in-sum-mean", "localization_heads")]
    for cell in ("out,argmax,mean", "in,sum,mean", "localization_heads"):
        for k in (1, 2):
            results = json.loads((out / "configs" / f"scorer_{cell.replace(',', '-')}_top{k}" / "results.json")
                                 .read_text())
            assert results["vrh"]["config"]["cell"] == cell
            assert results["vrh"]["ablation"]["heads"] == sorted(hf.cells[cell]["ranking"][:k],
                                                                 key=lambda n: tuple(map(int, n[1:].split("H"))))
    assert main(["report", str(out), "--output", str(tmp_path / "report")]) == 0
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    (block,) = report["scorers"]
    labels = [r["label"] for r in block["rows"]]
    assert labels == ["out,sum,mean (vera, vrh) [primary]", "in,sum,mean (qrhead)", "localization_heads",
                      "out,argmax,mean (retrieval_heads, ocr_heads)", "random (mean of draws; range)"]
    for row, config in zip(block["rows"][:4], ["top{k}", "scorer_in-sum-mean_top{k}",
                                               "scorer_localization_heads_top{k}", "scorer_out-argmax-mean_top{k}"],
                           strict=True):
        for k in (1, 2):
            acc = json.loads((out / "configs" / config.format(k=k) / "results.json").read_text())
            assert row["by_k"][str(k)]["acc"] == pytest.approx(acc["results"][TASK]["acc50,none"])
    randoms = [json.loads((out / "configs" / f"random2_s{s}" / "results.json").read_text())["results"][TASK]
               ["acc50,none"] for s in (0, 1)]
    assert block["rows"][-1]["by_k"]["2"]["acc"] == pytest.approx(sum(randoms) / 2)
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Scoring cells compared (paper Fig 2 / Table A9, Fig 3)" in md
    line = next(ln for ln in md.splitlines() if ln.startswith("| in,sum,mean (qrhead) |"))
    acc = block["rows"][1]["by_k"]["1"]
    assert line.split(" | ")[1] == f"{100 * acc['acc']:.1f} [{100 * acc['ci'][0]:.1f}, {100 * acc['ci'][1]:.1f}]"
    assert any(p.startswith("plots/scorers_") for p in report["files"]["plots"])
    capsys.readouterr()
    assert _sweep(args, heads, tmp_path / "bad", "--tasks", TASK, "--k", "1", "--compare-cells", "nope") == 2
    err = capsys.readouterr().err
    assert "scoring cell 'nope'" in err and err.count("\n") == 1 and not (tmp_path / "bad").exists()


def test_discovery_on_other_data_never_replays_earlier_answers(setting, tmp_path, monkeypatch, capsys):
    """The data-choosing environment (here VRH_SYNTH_CONFIG) is part of a discovery's identity: the same output
    folder with other scenes is refused without --force, and with it the earlier parts are discarded, so the
    samples are those a fresh discovery on the new scenes writes (a folder's cached answers once came back here)."""
    import shutil

    from vrh_lmms.cli import main

    _, heads, args = setting
    earlier = tmp_path / "earlier"
    shutil.copytree(heads.parent, earlier)
    monkeypatch.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 6, "seed": 9}))
    cmd = ["discover", "--model", "vrh_qwen25", "--model_args", args, "--tasks", TASK, "--limit", "3",
           "--gen-kwargs", "max_new_tokens=6"]
    assert main([*cmd, "--output", str(earlier / "heads.json")]) == 2
    assert main([*cmd, "--output", str(earlier / "heads.json"), "--force"]) == 0
    assert main([*cmd, "--output", str(tmp_path / "fresh" / "heads.json")]) == 0

    def samples(folder):
        path = next((folder / "heads.eval").glob(f"samples_{TASK}.jsonl"))
        return [(row["doc_id"], row["target"], row["filtered_resps"])
                for row in map(json.loads, path.read_text().splitlines())]

    assert samples(earlier) == samples(tmp_path / "fresh")
    assert samples(earlier) != samples(heads.parent)  # other scenes, other targets
