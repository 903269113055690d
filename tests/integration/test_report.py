"""`vrh-lmms report` end to end on fabricated lmms-eval-style folders; numbers recomputed here from the files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

from vrh_lmms.base.stats import tango_interval
from vrh_lmms.cli import main

MODEL = "org/Tiny-VLM-2B"
OTHER = "org/Other-VLM-7B"
TASK = "vrh_refcoco_val"
N_IMAGES = 40


def _docs(rng: np.random.Generator) -> list[tuple[int, str]]:
    docs, doc_id = [], 0
    for image in range(N_IMAGES):
        for _ in range(int(rng.integers(2, 5))):
            docs.append((doc_id, f"img{image}"))
            doc_id += 1
    return docs


def _record(image_id: str, status: str) -> dict:
    gt = [10.0, 10.0, 50.0, 50.0]
    pred = {"correct": [12.0, 11.0, 49.0, 52.0], "mislocated": [100.0, 100.0, 140.0, 140.0], "parse_failure": None}
    iou = {"correct": 0.9, "mislocated": 0.0, "parse_failure": 0.0}[status]
    return {"kind": "grounding", "image_id": image_id, "pred_box": pred[status], "gt_box": gt, "iou": iou,
            "correct": status == "correct", "status": status, "n_boxes": 0 if status == "parse_failure" else 1,
            "convention": "qwen2_5_vl", "image_size": [200, 200], "raw": f"answer {status}", "expression": "the dog"}


def _statuses(rng, docs, p_correct: float, p_parse: float) -> list[str]:
    """Image-level difficulty makes outcomes within an image correlated (as in RefCOCO)."""
    ease = {img: rng.normal() for _, img in docs}
    out = []
    for _, img in docs:
        p = 1 / (1 + np.exp(-(np.log(p_correct / (1 - p_correct)) + 1.5 * ease[img])))
        u = rng.random()
        out.append("correct" if u < p else ("parse_failure" if u < p + (1 - p) * p_parse else "mislocated"))
    return out


def _vrh_block(model: str, config_id: str, kind: str, k, seed, heads_model: str | None) -> dict:
    heads_file = None if heads_model is None else {"path": "heads.json", "sha256": "0" * 64, "model": heads_model}
    return {"schema": 1, "family": "qwen2_5_vl", "pretrained": model,
            "geometry": {"layers": 4, "heads": 8, "kv_heads": 2, "head_dim": 16},
            "ablation": {"spec": config_id, "heads": ["L0H1"], "mode": "none" if kind == "baseline" else "zero",
                         "seed": seed or 0, "method": None if kind == "baseline" else "hook", "heads_file": heads_file},
            "config": {"id": config_id, "kind": kind, "k": k, "seed": seed}}


def _write_config(root: Path, config_id: str, vrh: dict | None, lines: list[dict], task: str = TASK) -> None:
    folder = root / "configs" / config_id
    folder.mkdir(parents=True)
    with open(folder / f"samples_{task}.jsonl", "w") as fh:
        fh.writelines(json.dumps(line) + "\n" for line in lines)
    results = {"results": {task: {"alias": task}}, "model_name": MODEL}
    if vrh is not None:
        results["vrh"] = vrh
    (folder / "results.json").write_text(json.dumps(results))


def _lines(docs, statuses) -> list[dict]:
    return [{"doc_id": d, "target": "[10, 10, 50, 50]", "filtered_resps": f"answer {s}", "input": "Locate the dog.",
             "acc50": float(s == "correct"), "vrh_record": _record(img, s)}
            for (d, img), s in zip(docs, statuses, strict=True)]


# (config id, kind, k, seed, p_correct, p_parse)
CONFIGS = [
    ("baseline", "baseline", None, None, 0.85, 0.1),
    ("top4", "topk", 4, None, 0.45, 0.1),
    ("top8", "topk", 8, None, 0.2, 0.15),
    *[(f"random4_s{s}", "random", 4, s, 0.82, 0.1) for s in range(3)],
    *[(f"random8_s{s}", "random", 8, s, 0.8, 0.1) for s in range(3)],
    *[(f"layer_matched4_s{s}", "layer_matched", 4, s, 0.75, 0.1) for s in range(3)],
]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """A sweep folder: baseline, top-k for two k, random-k with 3 seeds each, layer-matched random-k."""
    rng = np.random.default_rng(7)
    root = tmp_path_factory.mktemp("sweep")
    docs = _docs(rng)
    (root / "sweep.json").write_text(json.dumps({"model": MODEL, "tasks": [TASK]}))
    for config_id, kind, k, seed, p, parse in CONFIGS:
        lines = _lines(docs, _statuses(rng, docs, p, parse))
        _write_config(root, config_id, _vrh_block(MODEL, config_id, kind, k, seed, MODEL if k else None), lines)
    (root / "configs" / "random12_s0").mkdir()  # incomplete: no results.json
    return root


def _read(path: Path) -> dict[str, dict]:
    return {str(json.loads(t)["doc_id"]): json.loads(t) for t in path.read_text().splitlines() if t.strip()}


def _image_totals(values, clusters):
    labels = sorted(set(clusters))
    y = np.array([sum(v for v, c in zip(values, clusters, strict=True) if c == lab) for lab in labels])
    m = np.array([sum(1 for c in clusters if c == lab) for lab in labels], dtype=float)
    return y, m


def _design_effect(values, clusters, naive_var):
    """Cluster-robust variance of the pooled mean over the independent-sample one, at least 1."""
    y, m = _image_totals(values, clusters)
    g, mean = len(y), y.sum() / m.sum()
    robust = g / (g - 1) * np.sum((y - mean * m) ** 2) / m.sum() ** 2
    return max(1.0, robust / naive_var)


def _sign_flip_p(diffs, clusters):
    """Independent re-implementation of the exact cluster sign-flip test: enumerate the null distribution of
    sum_k s_k |D_k| image by image (a dict of totals), two-sided."""
    totals, _ = _image_totals(diffs, clusters)
    dist = {0: 1.0}
    for d in np.abs(totals).astype(int):
        if d == 0:
            continue
        new: dict[int, float] = {}
        for t, p in dist.items():
            new[t + d] = new.get(t + d, 0.0) + p / 2
            new[t - d] = new.get(t - d, 0.0) + p / 2
        dist = new
    observed = abs(int(round(totals.sum())))
    return min(1.0, sum(p for t, p in dist.items() if abs(t) >= observed))


@pytest.fixture(scope="module")
def report(sweep, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("reports") / "r1"
    rc = main(["report", str(sweep), "--output", str(out), "--n-resamples", "2000", "--seed", "3"])
    assert rc == 0
    return out, json.loads((out / "report.json").read_text())


def _config(report_json, label):
    (group,) = report_json["groups"]
    if label == "baseline":
        return group["baseline"]
    return next(c for c in group["configs"] if c["label"] == label)


def test_accuracy_drop_tests_match_direct_computation(sweep, report):
    _, rep = report
    base = _read(sweep / "configs/baseline" / f"samples_{TASK}.jsonl")
    b_all = np.array([line["vrh_record"]["correct"] for line in base.values()], dtype=float)
    images = [line["vrh_record"]["image_id"] for line in base.values()]
    p, n = b_all.mean(), b_all.size
    deff = _design_effect(b_all, images, p * (1 - p) / n)
    low, high = proportion_confint(p * n / deff, n / deff, method="wilson")
    got = _config(rep, "baseline")["accuracy"]
    assert got["mean"] == pytest.approx(p) and got["deff"] == pytest.approx(deff) and deff > 1
    assert (got["ci_low"], got["ci_high"]) == pytest.approx((low, high))
    for config_id, *_ in CONFIGS[1:]:
        abl = _read(sweep / "configs" / config_id / f"samples_{TASK}.jsonl")
        assert list(abl) == list(base)
        b = b_all
        a = np.array([abl[d]["vrh_record"]["correct"] for d in base], dtype=float)
        got = _config(rep, config_id)
        assert got["accuracy"]["mean"] == pytest.approx(a.mean())
        assert got["paired"]["n_paired"] == n and got["drop"]["n_clusters"] == len(set(images)) == N_IMAGES
        assert got["drop"]["drop"] == pytest.approx(b.mean() - a.mean())
        d = b - a
        lost, gained = int(np.sum(d > 0)), int(np.sum(d < 0))
        dd = _design_effect(d, images, ((lost + gained) / n - d.mean() ** 2) / n)
        assert got["drop"]["deff"] == pytest.approx(dd)
        assert (got["drop"]["ci_low"], got["drop"]["ci_high"]) == pytest.approx(
            tango_interval(lost / dd, gained / dd, n / dd))
        assert got["test"]["pvalue"] == pytest.approx(_sign_flip_p(d, images), rel=1e-9, abs=1e-15)
        table = [[np.sum((b == 1) & (a == 1)), lost], [gained, np.sum((b == 0) & (a == 0))]]
        assert got["mcnemar"]["pvalue"] == pytest.approx(mcnemar(table, exact=True).pvalue)
        assert got["mcnemar"]["lost"] == lost and got["mcnemar"]["gained"] == gained


def test_incomplete_configuration_is_reported(report):
    _, rep = report
    assert any("random12_s0" in w and "incomplete" in w for w in rep["warnings"])
    assert rep["groups"][0]["doc_set"]["restricted"] is False


def test_null_comparison_and_corrections_in_three_families(report):
    _, rep = report
    (group,) = rep["groups"]
    for k in (4, 8):
        comp = next(n for n in group["null_comparisons"] if n["config"] == f"top{k}" and n["null_kind"] == "random")
        observed = _config(rep, f"top{k}")["drop"]["drop"]
        null = [_config(rep, f"random{k}_s{s}")["drop"]["drop"] for s in range(3)]
        assert comp["null_drops"] == pytest.approx(null)
        assert comp["null_mean"] == pytest.approx(np.mean(null))
        assert comp["null_sd"] == pytest.approx(np.std(null, ddof=1))
        assert comp["null_se"] == pytest.approx(np.std(null, ddof=1) / np.sqrt(len(null)))
        assert comp["pvalue"] == pytest.approx((1 + sum(x >= observed for x in null)) / (1 + len(null)))
        assert comp["p_floor"] == pytest.approx(1 / 4) and comp["family"] == "claims_vs_controls"
    kinds = {(n["config"], n["null_kind"]) for n in group["null_comparisons"]}
    assert kinds == {("top4", "random"), ("top8", "random"), ("top4", "layer_matched")}
    families = rep["multiple_testing"]["families"]
    assert [t["config"] for t in families["claims"]["tests"]] == ["top4", "top8"]
    assert len(families["controls"]["tests"]) == 9 and len(families["claims_vs_controls"]["tests"]) == 3
    for fam in families.values():
        raw = [t["p"] for t in fam["tests"]]
        assert [t["p_holm"] for t in fam["tests"]] == pytest.approx(list(multipletests(raw, method="holm")[1]))
        assert [t["p_bh"] for t in fam["tests"]] == pytest.approx(list(multipletests(raw, method="fdr_bh")[1]))
    top4 = _config(rep, "top4")
    assert top4["test"]["family"] == "claims"
    assert top4["test"]["p_holm"] == pytest.approx(families["claims"]["tests"][0]["p_holm"])
    assert _config(rep, "random4_s0")["test"]["family"] == "controls"


def test_summary_and_taxonomy(sweep, report):
    _, rep = report
    (group,) = rep["groups"]
    row = next(r for r in group["summary"] if r["k"] == 4)
    drops = [_config(rep, f"random4_s{s}")["drop"]["drop"] for s in range(3)]
    assert row["random"]["drop_mean"] == pytest.approx(np.mean(drops))
    assert row["random"]["drop_sd"] == pytest.approx(np.std(drops, ddof=1))
    se = np.std(drops, ddof=1) / np.sqrt(len(drops))
    assert row["random"]["drop_se"] == pytest.approx(se)
    # report.md prints the mean ± SE (the demo summary's statistic), labelled so in its header
    md = (report[0] / "report.md").read_text()
    assert f"{100 * np.mean(drops):.1f} ± {100 * se:.1f} (R=3)" in md and "Random draws: drop (mean ± SE)" in md
    assert "acc_mean" not in row["random"]  # a summary row holds the draws' drops, not their accuracies
    assert row["layer_matched"]["n"] == 3 and row["p_random_floor"] == pytest.approx(0.25)
    base = _read(sweep / "configs/baseline" / f"samples_{TASK}.jsonl")
    abl = _read(sweep / "configs/top4" / f"samples_{TASK}.jsonl")
    tax = _config(rep, "top4")["taxonomy"]
    for status in ("correct", "mislocated", "parse_failure"):
        expected = sum(line["vrh_record"]["status"] == status for line in abl.values())
        assert tax["counts"][status] == expected
    lost = [abl[d]["vrh_record"]["status"] for d in base
            if base[d]["vrh_record"]["status"] == "correct" and abl[d]["vrh_record"]["status"] != "correct"]
    assert _config(rep, "top4")["lost_to"] == {"mislocated": lost.count("mislocated"),
                                               "parse_failure": lost.count("parse_failure")}


def test_markdown_and_plots(report):
    out, rep = report
    md = (out / "report.md").read_text()
    top4 = _config(rep, "top4")
    base = _config(rep, "baseline")
    d = top4["drop"]
    first, rest = md.split("## Top-k against its baseline and its control draws", 1)
    assert first.index("## What was found") < first.index("How these numbers were made")
    sentences = [c["sentence"] for c in rep["claims"]]
    assert [c["config"] for c in rep["claims"]] == ["top4", "top8"]
    for sentence in sentences:
        assert f"- {sentence}" in first
    s4 = sentences[0]
    assert s4.startswith("**top4 of heads.json** [L0H1] on Tiny-VLM-2B / vrh_refcoco_val, zero-ablated")
    assert f"{100 * base['accuracy']['mean']:.1f} → {100 * top4['accuracy']['mean']:.1f}" in s4
    assert f"a drop of {100 * d['drop']:.1f} points (95% CI {100 * d['ci_low']:.1f} to {100 * d['ci_high']:.1f})" in s4
    assert f"over {N_IMAGES} images p = {top4['test']['pvalue']:.3g}" in s4
    assert "of 3 random draws" in s4 and "of 3 layer-matched random draws" in s4 and "too few draws" in s4
    assert "no random, layer-matched or image-matched draws" not in s4
    assert "random draws" in sentences[1] and "layer-matched" not in sentences[1]  # top8 has no layer-matched draws
    row = next(line for line in rest.splitlines() if line.startswith("| Tiny-VLM-2B | vrh_refcoco_val | top4 of"))
    assert f"| {100 * base['accuracy']['mean']:.1f} | {100 * top4['accuracy']['mean']:.1f} |" in row
    assert f"{100 * d['drop']:.1f} [{100 * d['ci_low']:.1f}, {100 * d['ci_high']:.1f}]" in row
    assert "(R=3)" in row and "(floor 0.25)" in row
    assert "## Failure taxonomy (grounding)" in md and "VRH" not in md and "causal" not in md.lower()
    assert f"| {top4['test']['pvalue']:.3g} | claims |" in md
    assert "Head overlap" not in md and rep["overlap"] is None  # no heads files, no overlap
    for name in ("ksweep_Tiny-VLM-2B_vrh_refcoco_val.png", "drops_Tiny-VLM-2B_vrh_refcoco_val.png",
                 "taxonomy_Tiny-VLM-2B_vrh_refcoco_val.png"):
        assert f"plots/{name}" in rep["files"]["plots"]
        assert (out / "plots" / name).stat().st_size > 1000


def test_image_matched_draws_are_controls_beside_random_ones(tmp_path):
    """`sweep --control image-matched` draws: in the controls family with the random draws, an empirical null of
    their own in the claims-vs-controls family, a summary column pair, and named in the claim sentence."""
    rng = np.random.default_rng(11)
    root = tmp_path / "sweep"
    docs = _docs(rng)
    configs = [("baseline", "baseline", None, None, 0.85), ("top4", "topk", 4, None, 0.4),
               *[(f"random4_s{s}", "random", 4, s, 0.82) for s in range(3)],
               *[(f"image_matched4_s{s}", "image_matched", 4, s, 0.7) for s in range(4)]]
    for config_id, kind, k, seed, p in configs:
        lines = _lines(docs, _statuses(rng, docs, p, 0.1))
        _write_config(root, config_id, _vrh_block(MODEL, config_id, kind, k, seed, MODEL if k else None), lines)
    out = tmp_path / "report"
    assert main(["report", str(root), "--output", str(out), "--n-resamples", "200", "--no-plots"]) == 0
    rep = json.loads((out / "report.json").read_text())
    (group,) = rep["groups"]
    families = rep["multiple_testing"]["families"]
    assert [t["config"] for t in families["claims"]["tests"]] == ["top4"]
    assert sorted(t["config"] for t in families["controls"]["tests"]) == sorted(c[0] for c in configs[2:])
    comp = next(n for n in group["null_comparisons"] if n["null_kind"] == "image_matched")
    observed = _config(rep, "top4")["drop"]["drop"]
    null = [_config(rep, f"image_matched4_s{s}")["drop"]["drop"] for s in range(4)]
    assert comp["null_drops"] == pytest.approx(null) and comp["family"] == "claims_vs_controls"
    assert comp["pvalue"] == pytest.approx((1 + sum(x >= observed for x in null)) / 5)
    assert len(families["claims_vs_controls"]["tests"]) == 2
    (row,) = group["summary"]
    assert row["image_matched"]["n"] == 4 and row["image_matched"]["drop_mean"] == pytest.approx(np.mean(null))
    assert row["p_image_matched"] == pytest.approx(comp["pvalue"]) and row["p_image_matched_floor"] == 0.2
    assert _config(rep, "image_matched4_s1")["heads_label"] == "4 image-matched heads (seed 1)"
    (claim,) = rep["claims"]
    assert "of 3 random draws" in claim["sentence"] and "of 4 image-matched draws" in claim["sentence"]
    md = (out / "report.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| Model | Task | Heads |"))
    assert "Image-matched draws: drop (mean ± SE)" in header and "p vs image-matched" in header
    summary_row = next(line for line in md.splitlines() if line.startswith("| Tiny-VLM-2B | vrh_refcoco_val | top4"))
    assert summary_row.count("(R=") == 2 and "(R=4)" in summary_row and "(floor 0.2)" in summary_row


def test_refuses_to_overwrite_without_force(sweep, report, capsys):
    out, _ = report
    assert main(["report", str(sweep), "--output", str(out), "--n-resamples", "200", "--no-plots"]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["report", str(sweep), "--output", str(out), "--n-resamples", "200", "--no-plots", "--force"]) == 0


def test_ksweep_plot_draws_identical_control_draws(tmp_path):
    """Five draws at the same accuracy (0.87 each) average to a hair below their min in floating point; the min-max
    bar must still draw (matplotlib refused the negative error bar and the whole report failed)."""
    from vrh_lmms.report.plots import ksweep_plot

    def cfg(kind, k, acc, seed=None):
        return {"kind": kind, "mode": "zero", "heads_source": None, "k": k, "seed": seed, "heads_label": "top",
                "accuracy": {"mean": acc, "ci_low": acc - 0.05, "ci_high": acc + 0.05}}

    configs = [cfg("topk", 3, 0.41)] + [cfg(kind, 3, 0.87, s) for kind in ("random", "layer_matched")
                                        for s in range(5)]
    assert np.array([0.87] * 5).mean() < 0.87  # below their min: the rounding this test is about
    group = {"configs": configs, "baseline": {"accuracy": {"mean": 0.87, "ci_low": 0.8, "ci_high": 0.92}},
             "metric": "acc50", "model": "m", "task": "t"}
    path = ksweep_plot(group, "zero", tmp_path / "k.png")
    assert path is not None and path.stat().st_size > 1000


def _md_tables(md: str) -> list[list[str]]:
    """The markdown tables of report.md: their lines, separator rows left out."""
    tables, current = [], []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            if not line.startswith("|---"):
                current.append(line)
        elif current:
            tables.append(current)
            current = []
    return tables


def _images(page: str) -> list[tuple[str, str]]:
    """(src, title) of every <img> of a page."""
    from html.parser import HTMLParser

    found = []

    class Images(HTMLParser):
        def handle_starttag(self, tag, attrs):
            if tag == "img":
                a = dict(attrs)
                found.append((a.get("src", ""), a.get("title", "")))

    Images().feed(page)
    return found


@pytest.fixture(scope="module")
def html_report(sweep, tmp_path_factory) -> tuple[Path, dict]:
    """A report of its own (test_refuses_to_overwrite_without_force rewrites the shared one without plots)."""
    out = tmp_path_factory.mktemp("reports") / "html"
    assert main(["report", str(sweep), "--output", str(out), "--n-resamples", "500"]) == 0
    return out, json.loads((out / "report.json").read_text())


def test_html_page_holds_the_markdown_with_plots_embedded(html_report):
    """report.html: the same sections, tables and rows as report.md, the verdict first, every plot embedded as the
    very bytes of its PNG, nothing loaded from elsewhere."""
    import base64
    import html
    import re

    out, rep = html_report
    md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert rep["files"]["html"] == "report.html"
    headings = re.findall(r"^## (.+)$", md, re.M)
    shown = re.findall(r"<h2>(.+?)</h2>", page)
    assert shown == headings and headings[0] == "What was found"
    tables = _md_tables(md)
    html_tables = re.findall(r"<table>(.*?)</table>", page, re.S)
    assert len(html_tables) == len(tables) >= 4
    for lines, table in zip(tables, html_tables, strict=True):
        assert table.count("<tr>") == len(lines)
    assert page.index("What was found") < page.index("<table>")
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    for claim in rep["claims"]:
        assert claim["sentence"].replace("**", "") in text
    images = _images(page)
    assert sorted(title for _, title in images) == sorted(rep["files"]["plots"])
    for src, title in images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]) == (out / title).read_bytes()
    assert not re.search(r'(src|href)="(?!data:)', page)


def test_html_page_renders_in_chromium(html_report, tmp_path):
    """The page in a real browser: a screenshot of the top of the page with text and tables on it, and every plot
    decoded at its natural size and laid out on the page."""
    from support.chromium import SKIP_REASON, assert_fits_the_page, find_chromium, ink, render

    if not find_chromium():
        pytest.skip(SKIP_REASON)
    out, rep = html_report
    rendering = render(out / "report.html", tmp_path)
    assert_fits_the_page(rendering)
    size, inked, colours = ink(rendering.screenshot)
    assert size == (1280, 2000)
    assert inked > 0.02 and colours > 20, (inked, colours)
    assert sorted(i["title"] for i in rendering.images) == sorted(rep["files"]["plots"])
    for img in rendering.images:
        assert img["complete"] and img["width"] > 100 and img["height"] > 100, img
        assert img["shown"] > 100 and img["shown_height"] > 50, img
        assert img["ink"] > 0.01, img  # a picture, not an empty or half-decoded frame
