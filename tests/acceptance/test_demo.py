"""The README's main job: `vrh-lmms demo` on the shipped tiny VLM. Its figures are computed every run; this test
recomputes them from the sweep's sample files and checks the acceptance criteria of the demo model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import offline_env
from support.demo_runs import run_demo_cli

from vrh_lmms.base.paths import assets_path
from vrh_lmms.pipelines.demo.pipeline import TASK

MODEL = assets_path() / "demo_model"
pytestmark = pytest.mark.skipif(not (MODEL / "config.json").is_file(), reason="no shipped demo model")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "run"
    proc = run_demo_cli(out)
    (out.parent / "console.stdout").write_text(proc.stdout)
    (out.parent / "console.stderr").write_text(proc.stderr)
    return out


def records(path: Path) -> dict[int, dict]:
    with open(path) as f:
        return {int(r["doc_id"]): r["vrh_record"] for r in map(json.loads, f)}


def test_demo_writes_report_and_summary(demo_run):
    out = demo_run
    for rel in ("heads.json", "sweep/sweep.json", "report/report.md", "report/report.json", "demo_summary.json"):
        assert (out / rel).is_file(), rel
    assert list((out / "report" / "plots").glob("*.png"))
    assert (out / "kcurve.png").stat().st_size > 1000
    assert "![k-curve](kcurve.png)" in (out / "demo_summary.md").read_text()
    assert json.loads((out / "sweep" / "sweep.json").read_text())["pack"] > 1, "the demo packs configurations"


def test_acceptance_figures_match_the_samples(demo_run):
    out = demo_run
    summary = json.loads((out / "demo_summary.json").read_text())
    acc = summary["acceptance"]
    configs = out / "sweep" / "configs"
    base = records(configs / "baseline" / f"samples_{TASK}.jsonl")
    assert acc["baseline_acc"] == pytest.approx(np.mean([r["correct"] for r in base.values()]))
    report = json.loads((out / "report" / "report.json").read_text())
    group = report["groups"][0]
    assert group["baseline"]["accuracy"]["mean"] == pytest.approx(acc["baseline_acc"])
    for row in acc["rows"]:
        top = records(configs / f"top{row['k']}" / f"samples_{TASK}.jsonl")
        drop = np.mean([base[i]["correct"] for i in base]) - np.mean([top[i]["correct"] for i in base])
        assert row["topk_drop"] == pytest.approx(drop)
        reported = next(c for c in group["configs"] if c["config_id"] == f"top{row['k']}")
        assert reported["drop"]["drop"] == pytest.approx(drop)


def test_summary_criteria_agree_with_the_rows(demo_run):
    summary = json.loads((demo_run / "demo_summary.json").read_text())
    total = summary["geometry"]["layers"] * summary["geometry"]["heads"]
    acc = summary["acceptance"]
    small = [r for r in acc["rows"] if r["k"] <= 0.10 * total]
    assert sorted(summary["criteria"]) == sorted(str(r["k"]) for r in small) and small
    for row in small:
        checks = summary["criteria"][str(row["k"])]
        # Compared at the precision the summary prints (0.1 point): the checks must agree with what is shown.
        assert checks["top-k drop >= 40 points"] == (round(row["topk_drop"], 9) >= 0.40)
        assert checks["live random-k mean drop <= 10 points"] == (round(row["random_mean_drop"], 9) <= 0.10)
        assert checks["baseline >= 80%"] == (round(acc["baseline_acc"], 9) >= 0.80)


def test_a_demo_folder_is_recognised_as_ours(demo_run):
    """`demo --force` may replace a finished demo run (every entry is recognised), and without --force the
    refusal says so; a planted foreign file makes --force refuse (test_owned.py)."""
    from vrh_lmms.base import owned
    from vrh_lmms.base.errors import VRHError
    from vrh_lmms.pipelines.demo.pipeline import demo_layout, run_demo

    assert owned.foreign_entries(demo_run, demo_layout(demo_run)) == []
    with pytest.raises(VRHError, match="holds an earlier demo run; choose another --output or pass --force"):
        run_demo(demo_run)


def test_readme_dpo_command_works_on_the_demo_sweep(demo_run, tmp_path):
    """README's `vrh-lmms dpo-pairs runs/demo/sweep --config top5 ...` needs no image folder: every scene is
    regenerated from the scene config the sweep recorded, and is pixel for pixel the image the model was shown
    (the parquet the task read, in the demo's data cache)."""
    import io

    import pyarrow.parquet as pq
    from PIL import Image

    out = tmp_path / "dpo.jsonl"
    proc = subprocess.run([sys.executable, "-m", "vrh_lmms", "dpo-pairs", str(demo_run / "sweep"), "--config",
                           "top5", "--output", str(out)], env=offline_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    top5 = records(demo_run / "sweep" / "configs" / "top5" / f"samples_{TASK}.jsonl")
    assert len(rows) == sum(not r["correct"] for r in top5.values()) > 0
    shown = {}
    for parquet in (demo_run / "data").rglob("test.parquet"):
        table = pq.read_table(parquet, columns=["image_id", "image"]).to_pylist()
        shown.update({str(r["image_id"]): r["image"]["bytes"] for r in table})
    for row in rows:
        (path,) = row["images"]
        regenerated = np.asarray(Image.open(path).convert("RGB"))
        original = np.asarray(Image.open(io.BytesIO(shown[row["meta"]["image_id"]])).convert("RGB"))
        assert np.array_equal(regenerated, original), row["meta"]


def _meets_design_targets(row: dict) -> bool:
    return (row["topk_drop"] >= 0.40 and row["topk_drop_ci"][0] > 0
            and len(row["random_drops"]) >= 5 and len(row["layer_matched_drops"]) >= 5
            and row["random_mean_drop"] <= 0.10 and row["layer_matched_mean_drop"] <= 0.10
            and max(row["topk_parse_failure"], row["random_max_parse_failure"],
                    row["layer_matched_max_parse_failure"]) <= 0.05)


def test_the_demos_controls_are_live_and_its_verdict_says_which_targets_hold(demo_run):
    """No random or layer-matched draw of the demo holds a head that writes nothing; the uniform draws over
    all heads beside them name their dead heads; a layer-matched draw that live heads cannot fill is reported
    unavailable with its reason; the summary's verdict is recomputed from the rows (live controls)."""
    from vrh_lmms.model.backbone import dead_heads, locate_decoder

    manifest = json.loads((demo_run / "sweep" / "sweep.json").read_text())
    from transformers import AutoModelForImageTextToText

    dead = {str(h) for h in dead_heads(locate_decoder(AutoModelForImageTextToText.from_pretrained(str(MODEL))))}
    assert set(manifest["dead_heads"]) == dead and len(dead) == 54
    configs = demo_run / "sweep" / "configs"
    for cfg in manifest["configurations"]:
        if cfg["status"] == "unavailable":
            assert cfg["kind"] == "layer_matched" and "live head" in cfg["reason"]
            assert not (configs / cfg["id"]).exists()
            continue
        ablation = json.loads((configs / cfg["id"] / "results.json").read_text())["vrh"]["ablation"]
        if cfg["kind"] in ("random", "layer_matched"):
            assert ablation["pool"] == "live" and not set(ablation["heads"]) & dead, cfg["id"]
        if cfg["kind"] == "random_all":
            assert ablation["dead_heads"] == [h for h in ablation["heads"] if h in dead]
    summary = json.loads((demo_run / "demo_summary.json").read_text())
    total = summary["geometry"]["layers"] * summary["geometry"]["heads"]
    met = [row["k"] for row in summary["acceptance"]["rows"] if row["k"] <= 0.10 * total and _meets_design_targets(row)]
    assert summary["criteria_met_at"] == met  # what demo_summary.md's note on the design targets states
    lines = (demo_run / "demo_summary.md").read_text().splitlines()
    note = next(line for line in lines if line.startswith("Design targets of the demo model"))
    assert ("): met at k" if met else "): not met at any k") in note
    # the first line is the finding: each top-k drop with its interval, against its live controls
    assert lines[0].startswith("**Ablating the discovered top-k heads cuts Acc@0.5")
    for row in summary["acceptance"]["rows"]:
        lo, hi = row["topk_drop_ci"]
        assert f"{100 * row['topk_drop']:.1f}" in lines[0] and f"[{100 * lo:.1f}, {100 * hi:.1f}] at k = {row['k']}" \
            in lines[0]
        assert f"{100 * row['random_mean_drop']:.1f} ± {100 * row['random_mean_drop_se']:.1f}" in lines[0]


@pytest.mark.xfail(strict=True, reason="against live controls the shipped model misses the demo's design targets "
                   "(live random-5 costs about 23 points; layers 3-5 hold too few live heads for a layer-matched "
                   "draw); a new design is a separate decision. Strict: this fails loudly once a model meets them.")
def test_demo_model_meets_the_acceptance_criteria(demo_run):
    """The demo's design targets, from its own sample files, against live controls: baseline >= 80%, and for some
    k <= 10% of all heads the top-k drop is >= 40 points with a CI above 0, random-k and layer-matched random-k drops
    average <= 10 points over >= 5 draws each, and parse failures stay <= 5% (top-k and the worst control draw)."""
    summary = json.loads((demo_run / "demo_summary.json").read_text())
    total = summary["geometry"]["layers"] * summary["geometry"]["heads"]
    acc = summary["acceptance"]
    assert acc["baseline_acc"] >= 0.80
    met = [row["k"] for row in acc["rows"] if row["k"] <= 0.10 * total and _meets_design_targets(row)]
    assert met, acc["rows"]


def test_demo_console_is_short_and_names_the_report_files(demo_run):
    """A screenful: the steps, the verdict per k and the files written; lmms-eval's per-run bars and warnings are in
    the log file, not on the console."""
    stdout = (demo_run.parent / "console.stdout").read_text()
    stderr = (demo_run.parent / "console.stderr").read_text()
    lines = (stdout + stderr).splitlines()
    assert len(lines) < 40, "\n".join(lines)
    for rel in ("report/report.html", "report/report.md", "demo_summary.md", "kcurve.png", "vrh-lmms.log"):
        assert str(demo_run / rel) in stdout, rel
    summary = json.loads((demo_run / "demo_summary.json").read_text())
    first = (demo_run / "demo_summary.md").read_text().splitlines()[0].replace("**", "")
    assert "[2/3] sweep" in stderr
    # the finding first, the design targets under the table as a note on the model
    assert stdout.lstrip().startswith(first) and stdout.index(first) < stdout.index("Design targets of the demo model")
    assert ("): met at k" if summary["criteria_met_at"] else "): not met at any k") in stdout
    assert "Model Responding" not in stdout + stderr and "WARNING" not in stdout + stderr
    log = (demo_run / "vrh-lmms.log").read_text()
    assert log.startswith("# vrh-lmms log") and "Model Responding" in log and "WARNING" in log


def test_demo_report_page_puts_the_verdict_first_and_embeds_every_plot(demo_run, tmp_path):
    """report/report.html: demo_summary.md (verdict, table, k-curve) ahead of report.md, every picture embedded; in
    headless Chromium every picture decodes and shows."""
    import html
    import re

    from support.chromium import SKIP_REASON, assert_fits_the_page, find_chromium, ink, render

    page = (demo_run / "report" / "report.html").read_text()
    summary_md = (demo_run / "demo_summary.md").read_text()
    verdict = re.sub(r"\*\*", "", summary_md.splitlines()[0]).split(" (")[0]
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    assert text.index(verdict) < text.index("Visual retrieval heads: ablation report") < text.index("What was found")
    sources = re.findall(r'<img [^>]*src="([^"]{0,40})', page)
    plots = json.loads((demo_run / "report" / "report.json").read_text())["files"]["plots"]
    pictures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", summary_md)  # k-curve, and the recall step's two figures
    assert "kcurve.png" in pictures and "recall.png" in pictures
    assert len(sources) == len(plots) + len(pictures) and all(s.startswith("data:image/png;base64,") for s in sources)
    if not find_chromium():
        pytest.skip(SKIP_REASON)
    rendering = render(demo_run / "report" / "report.html", tmp_path)
    assert_fits_the_page(rendering)  # at 1,280 px: no sideways scrolling, every plot shown at >= half its size
    size, inked, colours = ink(rendering.screenshot)
    assert size == (1280, 2000) and inked > 0.02 and colours > 20, (inked, colours)
    assert sorted(i["title"] for i in rendering.images) == sorted([*pictures, *plots])
    for img in rendering.images:
        assert img["complete"] and img["width"] > 100 and img["height"] > 100, img
        assert img["shown"] > 100 and img["ink"] > 0.01, img


def test_demo_plots_fit_a_page(demo_run):
    """Every picture the demo writes (report plots, k-curve, recall figures) is at most 2,400 px wide."""
    from PIL import Image

    pngs = sorted(demo_run.glob("*.png")) + sorted((demo_run / "report").rglob("*.png")) + \
        sorted((demo_run / "recall").glob("*.png"))
    assert len(pngs) >= 8
    sizes = {str(p.relative_to(demo_run)): Image.open(p).size for p in pngs}
    assert all(w <= 2400 for w, _ in sizes.values()), sizes


def _retrieval_top(heads: Path, k: int) -> list[str]:
    return json.loads(heads.read_text())["cells"]["retrieval"]["ranking"][:k]


def test_recall_step_figures_are_the_heads_files_and_the_samples(demo_run):
    """The recall line: the top-k overlaps are the heads files' own rankings intersected (scipy's hypergeometric
    tail), the masked heads are each file's top-k, and every accuracy is the mean of its sample file."""
    from scipy.stats import hypergeom

    from vrh_lmms.pipelines.demo.recall import NEEDLE_TASK, recall_line

    out = demo_run
    summary = json.loads((out / "demo_summary.json").read_text())
    recall = summary["recall"]
    k = recall["k"]
    assert not any(Path(p).is_absolute() for p in recall["heads_files"].values())  # relative to the demo's folder
    files = {s: out / p for s, p in recall["heads_files"].items()}
    assert files["backbone_recall"] == out / "recall" / "backbone" / "heads.json"
    assert json.loads(files["backbone_recall"].read_text())["model"]["id"].endswith("demo_backbone")
    tops = {s: _retrieval_top(p, k) for s, p in files.items() if s != "grounding"}
    tops["grounding"] = json.loads(files["grounding"].read_text())["ranking"][:k]
    pair = next(r for r in recall["overlap"] if (r["a"], r["b"]) == ("backbone_recall", "vlm_recall"))
    shared = set(tops["backbone_recall"]) & set(tops["vlm_recall"])
    assert pair["overlap"] == len(shared) and set(pair["shared"]) == shared
    assert pair["p_value"] == pytest.approx(float(hypergeom.sf(len(shared) - 1, 96, k, k)) if shared else 1.0)

    sweeps = out / "recall"
    needle = recall["ablation"]["needle"]
    base = records(sweeps / "sweep_needle" / "configs" / "baseline" / f"samples_{NEEDLE_TASK}.jsonl")
    assert needle["baseline"] == pytest.approx(np.mean([r["correct"] for r in base.values()]))
    for head_set, folder in (("vlm_recall", "sweep_needle"), ("backbone_recall", "sweep_needle_backbone_heads"),
                             ("grounding", "sweep_needle_grounding_heads")):
        config = sweeps / folder / "configs" / f"top{k}"
        masked = json.loads((config / "results.json").read_text())["vrh"]["ablation"]["heads"]
        assert sorted(masked) == sorted(tops[head_set]), head_set
        top = records(config / f"samples_{NEEDLE_TASK}.jsonl")
        assert needle["sets"][head_set]["acc"] == pytest.approx(np.mean([r["correct"] for r in top.values()]))
    grounding = recall["ablation"]["grounding"]
    top = records(sweeps / "sweep_grounding_backbone_heads" / "configs" / f"top{k}" / f"samples_{TASK}.jsonl")
    assert grounding["sets"]["backbone_recall"]["acc"] == pytest.approx(np.mean([r["correct"] for r in top.values()]))
    assert grounding["sets"]["grounding"]["acc"] == pytest.approx(summary["acceptance"]["rows"][0]["topk_acc"])

    md = (out / "demo_summary.md").read_text()
    assert recall_line(recall) in md and "![recall heads](recall.png)" in md
    assert (out / "recall.png").stat().st_size > 1000 and (out / "recall" / "score_maps.png").stat().st_size > 1000
    report = (out / "report" / "report.md").read_text()
    assert f"top{k}@task:{NEEDLE_TASK}" in report and f"top{k}@demo_backbone" in report


def test_iou_equals_acc50_on_the_demo_as_the_readme_says(demo_run):
    """The README tells why lmms-eval's table shows iou = acc50 for the demo model: each answer is the target's
    exact box (IoU 1) or another object's, which never overlaps it (IoU 0)."""
    for cfg in ("baseline", "top5"):
        rows = [json.loads(line) for line in
                open(demo_run / "sweep" / "configs" / cfg / f"samples_{TASK}.jsonl")]
        ious = {round(r["vrh_record"]["iou"], 6) for r in rows}
        assert ious <= {0.0, 1.0}, (cfg, sorted(ious)[:5])
        results = json.loads((demo_run / "sweep" / "configs" / cfg / "results.json").read_text())["results"][TASK]
        assert results["iou,none"] == pytest.approx(results["acc50,none"])
        # the task's cluster_key: lmms-eval's clustered SE (one scene per image: equal to its naive one here)
        assert results["acc50_stderr_clustered,none"] == pytest.approx(results["acc50_stderr_clt,none"])
