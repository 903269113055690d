"""The report of a sweep whose control draws ran on a doc subset (`sweep --control-docs N`), on fabricated folders
whose images hold 2-4 docs each: every control's drop and interval are `subsample_drop` computed here from the samples
files (baseline restricted to the subset, image ids of all the baseline's docs), the top-k keeps every doc, the
report says on its first lines how many docs the controls ran on, and runs that disagree with their subset are
refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_report import MODEL, TASK, _docs, _lines, _statuses, _vrh_block, _write_config

from vrh_lmms.base.stats.subsample import image_subsample, subsample_drop
from vrh_lmms.cli import main

CONTROLS = [(f"random4_s{s}", "random", 0.7) for s in range(3)] + [("layer_matched4_s0", "layer_matched", 0.6)]


def _sweep(root, n_docs: int = 40, seed: int = 3, broken: str | None = None):
    """Baseline and top4 on every doc, the controls on the image subset of `n_docs` (`broken`: a control whose
    samples hold one doc too many)."""
    rng = np.random.default_rng(5)
    docs = _docs(rng)
    rows = image_subsample([img for _, img in docs], n_docs, seed=seed)
    subset = [docs[i] for i in rows]
    record = {"rule": "image_subsample", "n": n_docs, "seed": seed,
              "tasks": {TASK: {"doc_ids": [d for d, _ in subset], "n_docs": len(subset),
                               "n_images": len({img for _, img in subset}), "all_docs": len(docs),
                               "all_images": len({img for _, img in docs})}}}
    for config_id, kind, k, p in [("baseline", "baseline", None, 0.85), ("top4", "topk", 4, 0.4)]:
        _write_config(root, config_id, _vrh_block(MODEL, config_id, kind, k, None, MODEL if k else None),
                      _lines(docs, _statuses(rng, docs, p, 0.1)))
    for config_id, kind, p in CONTROLS:
        vrh = _vrh_block(MODEL, config_id, kind, 4, int(config_id[-1]), MODEL) | {"doc_subset": record}
        evaluated = docs if config_id == broken else subset
        _write_config(root, config_id, vrh, _lines(evaluated, _statuses(rng, evaluated, p, 0.1)))
    return docs, subset


def _read(path):
    return {json.loads(t)["doc_id"]: json.loads(t) for t in path.read_text().splitlines()}


def test_control_drops_are_subsample_drop_on_the_shared_subset(tmp_path):
    docs, subset = _sweep(tmp_path / "sweep")
    assert len({img for _, img in subset}) < len(subset) < len(docs)  # whole images of several docs each
    out = tmp_path / "report"
    assert main(["report", str(tmp_path / "sweep"), "--output", str(out), "--n-resamples", "200", "--no-plots"]) == 0
    rep = json.loads((out / "report.json").read_text())
    (group,) = rep["groups"]
    base = _read(tmp_path / "sweep" / "configs" / "baseline" / f"samples_{TASK}.jsonl")
    all_images = [base[d]["vrh_record"]["image_id"] for d, _ in docs]
    drops = {}
    for config_id, _, _ in CONTROLS:
        mine = _read(tmp_path / "sweep" / "configs" / config_id / f"samples_{TASK}.jsonl")
        ids = sorted(mine)
        by_hand = subsample_drop([float(base[d]["vrh_record"]["correct"]) for d in ids],
                                 [float(mine[d]["vrh_record"]["correct"]) for d in ids],
                                 [mine[d]["vrh_record"]["image_id"] for d in ids], all_images)
        block = next(c for c in group["configs"] if c["config_id"] == config_id)
        assert by_hand.drop != 0 and by_hand.ci_low < by_hand.drop < by_hand.ci_high
        assert block["drop"]["drop"] == pytest.approx(by_hand.drop, abs=1e-12)
        assert [block["drop"]["ci_low"], block["drop"]["ci_high"]] == pytest.approx(
            [by_hand.ci_low, by_hand.ci_high], abs=1e-12)
        assert block["drop"]["subset"] == pytest.approx(by_hand.to_dict())
        assert block["paired"]["n_paired"] == len(subset)
        assert block["accuracy"]["n"] == len(subset)
        drops[config_id] = by_hand.drop
    top = next(c for c in group["configs"] if c["config_id"] == "top4")
    assert top["paired"]["n_paired"] == len(docs) and "subset" not in top["drop"]
    comp = next(n for n in group["null_comparisons"] if n["null_kind"] == "random")
    assert comp["null_drops"] == pytest.approx([drops[f"random4_s{s}"] for s in range(3)])
    sub = group["doc_set"]["control_docs"]
    assert (sub["n_docs"], sub["all_docs"], sub["asked"], sub["seed"], sub["n_configs"]) == (
        len(subset), len(docs), 40, 3, 4)
    assert group["doc_set"]["n_docs"] == len(docs)
    first = (out / "report.md").read_text().splitlines()[2]
    assert first.startswith(f"**Control draws ran on {len(subset)} of {len(docs)} docs**"), first


def test_a_control_off_its_subset_is_refused(tmp_path, capsys):
    _sweep(tmp_path / "sweep", broken="random4_s1")
    assert main(["report", str(tmp_path / "sweep"), "--output", str(tmp_path / "r"), "--no-plots"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "random4_s1" in err[0] and "doc subset" in err[0], err


def test_controls_of_two_subsets_are_refused(tmp_path, capsys):
    _sweep(tmp_path / "sweep")
    folder = tmp_path / "sweep" / "configs" / "random4_s2"
    results = json.loads((folder / "results.json").read_text())
    results["vrh"]["doc_subset"]["tasks"][TASK]["doc_ids"] = results["vrh"]["doc_subset"]["tasks"][TASK]["doc_ids"][1:]
    (folder / "results.json").write_text(json.dumps(results))
    assert main(["report", str(tmp_path / "sweep"), "--output", str(tmp_path / "r"), "--no-plots"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "2 different doc subsets" in err[0], err
