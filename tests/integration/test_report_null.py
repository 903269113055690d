"""`vrh-lmms report` on synthetic sweeps with no true drop and image-clustered flips, as a reviewer would try it.

300 images with 1-7 referring expressions each (sweep_files.py: lines as `vrh-lmms sweep` writes them). Baseline
outcomes share an image effect; each of 100 null configurations wipes (all wrong) or rescues (all right) whole
images, balanced so that the expected drop is zero. The exact McNemar test rejects 23 of these 100 configurations at 5%;
the report's primary test must reject at most 9%.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.special import expit
from support.sweep_files import MODEL, TASK, Doc, LineWriter, make_docs, statuses_from, vrh_block, write_manifest

from vrh_lmms.cli import main

N_NULL = 100


def _null_ablation(rng, image_index: np.ndarray, base: np.ndarray, mean_p: float, hurt: float = 0.05) -> np.ndarray:
    n_images = int(image_index.max()) + 1
    rescue = hurt * mean_p / (1 - mean_p)
    r = rng.random(n_images)
    wipe, save = (r < hurt)[image_index], ((r >= hurt) & (r < hurt + rescue))[image_index]
    return np.where(wipe, False, np.where(save, True, base))


@pytest.fixture(scope="module")
def null_sweep(tmp_path_factory) -> tuple[Path, list[Doc], dict]:
    rng = np.random.default_rng(2024)
    docs = make_docs(rng)
    images = sorted({d.image_id for d in docs})
    image_index = np.array([images.index(d.image_id) for d in docs])
    ease = rng.normal(size=len(images))
    p = expit(1.386 + 1.5 * ease)  # logit(0.8) + 1.5 u
    mean_p = float(expit(1.386 + 1.5 * np.random.default_rng(0).normal(size=1_000_000)).mean())
    base = rng.random(len(docs)) < p[image_index]
    root = tmp_path_factory.mktemp("null_sweep")
    write_manifest(root)
    writer = LineWriter(docs)
    writer.write(root, "baseline", vrh_block("baseline", "baseline", None, None), statuses_from(base, rng))
    outcomes = {}
    for s in range(N_NULL):
        abl = _null_ablation(rng, image_index, base, mean_p)
        outcomes[f"random5_s{s}"] = abl
        writer.write(root, f"random5_s{s}", vrh_block(f"random5_s{s}", "random", 5, s, heads_model=None),
                     statuses_from(abl, rng))
    # top5 changes nothing: zero discordant pairs.
    writer.write(root, "top5", vrh_block("top5", "topk", 5, None, heads=["L1H2", "L3H0", "L2H5", "L0H1", "L3H7"]),
                 statuses_from(base, rng))
    return root, docs, {"base": base, **outcomes}


@pytest.fixture(scope="module")
def null_report(null_sweep, tmp_path_factory) -> dict:
    root, _, _ = null_sweep
    out = tmp_path_factory.mktemp("null_report") / "r"
    assert main(["report", str(root), "--output", str(out), "--n-resamples", "200", "--no-plots"]) == 0
    rep = json.loads((out / "report.json").read_text())
    rep["_markdown"] = (out / "report.md").read_text()
    return rep


def test_report_rejects_at_most_9_percent_of_null_configurations(null_report):
    (group,) = null_report["groups"]
    nulls = [c for c in group["configs"] if c["kind"] == "random"]
    assert len(nulls) == N_NULL
    assert all(c["paired"]["n_clusters"] == 300 and c["test"]["method"] == "exact" for c in nulls)
    rejected = np.mean([c["test"]["pvalue"] < 0.05 for c in nulls])
    mcnemar = np.mean([c["mcnemar"]["pvalue"] < 0.05 for c in nulls])
    assert rejected <= 0.09, rejected  # measured 0.05 (Durkalski's chi-square: 0.05)
    assert mcnemar >= 0.15, mcnemar  # the same configurations fool the exact McNemar test (measured 0.23)
    assert all(c["test"]["family"] == "controls" for c in nulls)
    assert np.mean([c["test"]["p_holm"] < 0.05 for c in nulls]) <= 0.01
    # Drop intervals of the null configurations cover the true drop of 0 about as often as promised.
    assert np.mean([c["drop"]["ci_low"] <= 0 <= c["drop"]["ci_high"] for c in nulls]) >= 0.90


def test_zero_discordant_pairs_give_a_non_degenerate_interval(null_report, null_sweep):
    (group,) = null_report["groups"]
    top = next(c for c in group["configs"] if c["label"] == "top5")
    assert top["mcnemar"]["lost"] == top["mcnemar"]["gained"] == 0
    d = top["drop"]
    assert d["drop"] == 0.0 and d["ci_low"] < 0 < d["ci_high"] and d["ci_high"] - d["ci_low"] > 0.005
    assert d["deff_method"] == "worst case"
    assert d["bootstrap"]["degenerate"]  # what the old percentile bootstrap printed: [0, 0]
    assert top["test"]["pvalue"] == 1.0


def test_first_page_states_each_claim_with_test_and_controls(null_report):
    md = null_report["_markdown"]
    first = md.split("## Top-k against its baseline", 1)[0]
    (claim,) = null_report["claims"]
    assert claim["config"] == "top5" and f"- {claim['sentence']}" in first
    s = claim["sentence"]
    assert "[L1H2, L3H0, L2H5, L0H1, L3H7]" in s and "cluster sign-flip test over 300 images p = 1" in s
    assert "of 100 random draws" in s and "R = 100" in s and "floor 1/(R+1) = 0.0099" in s
    assert "too few draws" not in s and "no random, layer-matched or image-matched draws" not in s
    comp = null_report["groups"][0]["null_comparisons"][0]
    assert (f"Holm over the 1 comparisons with controls: {comp['p_holm']:.3g}, "
            f"{'significant' if comp['p_holm'] <= 0.05 else 'not significant'} at 5%") in s
    assert "causal" not in md.lower() and "VRH (top-k)" not in md
    summary = md.split("## Top-k against its baseline and its control draws", 1)[1].split("##", 1)[0]
    assert "Random-k (mean" not in summary and "(R=100)" in summary  # drops of the draws, never their accuracies


def _shuffle_within_images(docs: list[Doc], rng) -> list[Doc]:
    """The same lines under permuted doc ids: each image's docs trade ids among themselves."""
    by_image: dict[str, list[Doc]] = {}
    for d in docs:
        by_image.setdefault(d.image_id, []).append(d)
    out = {}
    for members in by_image.values():
        perm = rng.permutation(len(members)) if len(members) > 1 else [0]
        if len(members) > 1 and np.all(perm == np.arange(len(members))):
            perm = np.roll(perm, 1)
        for d, j in zip(members, perm, strict=True):
            other = members[j]
            out[d.doc_id] = Doc(d.doc_id, d.image_id, other.expression, other.question_id, other.gt_box)
    return [out[d.doc_id] for d in docs]


def test_run_whose_docs_were_shuffled_within_images_is_refused(null_sweep, tmp_path, capsys):
    root, docs, outcomes = null_sweep
    sweep = tmp_path / "sweep"
    writer = LineWriter(docs)
    rng = np.random.default_rng(3)
    writer.write(sweep, "baseline", vrh_block("baseline", "baseline", None, None), statuses_from(outcomes["base"], rng))
    shuffled = LineWriter(_shuffle_within_images(docs, rng))
    shuffled.write(sweep, "top5", vrh_block("top5", "topk", 5, None), statuses_from(outcomes["random5_s0"], rng))
    assert main(["report", str(sweep), "--output", str(tmp_path / "r"), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "is not the same document in baseline" in err and "top5" in err
    assert "target" in err or "question_id" in err or "expression" in err
    assert not (tmp_path / "r").exists()


def test_intersection_is_an_error_unless_asked_for_and_then_stated(null_sweep, tmp_path, capsys):
    root, docs, outcomes = null_sweep
    sweep = tmp_path / "sweep"
    writer = LineWriter(docs)
    rng = np.random.default_rng(4)
    n = len(docs)
    writer.write(sweep, "baseline", vrh_block("baseline", "baseline", None, None), statuses_from(outcomes["base"], rng))
    writer.write(sweep, "top5", vrh_block("top5", "topk", 5, None), statuses_from(outcomes["random5_s1"], rng),
                 order=list(range(7, n)))  # an interrupted run: its first 7 docs are missing
    writer.write(sweep, "random5_s0", vrh_block("random5_s0", "random", 5, 0, heads_model=None),
                 statuses_from(outcomes["random5_s2"], rng))
    assert main(["report", str(sweep), "--output", str(tmp_path / "r"), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert f"baseline: {n} docs" in err and f"top5: {n - 7} docs (7 of baseline's missing, 0 others)" in err
    assert "--intersection" in err and "random5_s0" not in err
    out = tmp_path / "r2"
    assert main(["report", str(sweep), "--output", str(out), "--no-plots", "--intersection"]) == 0
    rep = json.loads((out / "report.json").read_text())
    (group,) = rep["groups"]
    assert group["doc_set"]["restricted"] and group["doc_set"]["n_docs"] == n - 7
    assert group["doc_set"]["per_run"] == {"baseline": n, "top5": n - 7, "random5_s0": n}
    for block in [group["baseline"], *group["configs"]]:  # every number in every row: the same docs
        assert block["accuracy"]["n"] == n - 7
    md = (out / "report.md").read_text()
    assert "only the docs all runs share (--intersection)" in md.split("## Top-k against", 1)[0]
    assert any("--intersection" in w for w in rep["warnings"])
    assert rep["groups"][0]["model"] == MODEL and rep["groups"][0]["task"] == TASK
