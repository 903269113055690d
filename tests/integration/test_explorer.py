"""explorer.html from `vrh-lmms report` and `vrh-lmms explore` on sweep folders in the documented format: the doc
filters in report.json against a direct count, the page's data block against the sample files, the escaping of what
runs name, and its Content-Security-Policy against its own script."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from pathlib import Path

import numpy as np
import pytest
from support.chromium import find_chromium
from support.sweep_files import LineWriter, make_docs, statuses_from, vrh_block, write_manifest

from vrh_lmms.cli import main
from vrh_lmms.report import ReportSettings, build_report
from vrh_lmms.report.explorer import json_block

HOSTILE = '</script><img src=x onerror="document.title=1">&amp; <b>bold</b>'
K, DRAWS = 3, 4


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    rng = np.random.default_rng(7)
    root = tmp_path_factory.mktemp("sweep")
    docs = make_docs(rng, n_images=24, sizes=(1, 3))
    docs[0] = type(docs[0])(docs[0].doc_id, docs[0].image_id, HOSTILE, docs[0].question_id, docs[0].gt_box)
    writer = LineWriter(docs)
    base = rng.random(len(docs)) < 0.85
    writer.write(root, "baseline", vrh_block("baseline", "baseline", 0, None), statuses_from(base, rng))
    top = base & (rng.random(len(docs)) < 0.4)
    writer.write(root, f"top{K}", vrh_block(f"top{K}", "topk", K, None, heads=["L0H1", "L2H3", "L3H0"]),
                 statuses_from(top, rng))
    for seed in range(DRAWS):
        draw = base & (rng.random(len(docs)) < 0.8)
        writer.write(root, f"random{K}_s{seed}", vrh_block(f"random{K}_s{seed}", "random", K, seed,
                                                           heads=["L1H1", "L0H0", "L3H7"]), statuses_from(draw, rng))
    write_manifest(root)
    return root


@pytest.fixture(scope="module")
def report(sweep, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("report") / "r"
    return out, build_report([sweep], out, ReportSettings(n_resamples=200, plots=False))


def _scores(sweep: Path, config: str) -> dict[str, float]:
    with open(sweep / "configs" / config / "samples_vrh_refcoco_testA.jsonl") as fh:
        return {str(r["doc_id"]): float(r["vrh_record"]["correct"]) for r in map(json.loads, fh)}


def _data(page: str) -> dict:
    block = re.search(r'<script type="application/json" id="explorer-data">(.*?)</script>', page, re.S)
    return json.loads(block.group(1))


def test_doc_filters_match_a_direct_count(sweep, report):
    _, rep = report
    (entry,) = rep["groups"][0]["doc_filters"]
    base, top = _scores(sweep, "baseline"), _scores(sweep, f"top{K}")
    draws = np.array([[_scores(sweep, f"random{K}_s{s}")[d] for d in base] for s in range(DRAWS)])
    b = np.array(list(base.values()))
    t = np.array([top[d] for d in base])
    by_control = (draws < b).sum(axis=0) >= DRAWS / 2
    ids = np.array(list(base))
    assert entry["topk_only"] == ids[(t < b) & ~by_control].tolist()
    assert entry["control_only"] == ids[by_control & ~(t < b)].tolist()
    assert entry["n_topk_only"] > 0 and entry["n_control_only"] + entry["n_topk_only"] < len(ids)
    assert entry["config"] == f"top{K}" and entry["control"] == "random" and len(entry["draws"]) == DRAWS


def test_page_data_are_the_sample_files(sweep, report):
    out, rep = report
    page = (out / "explorer.html").read_text(encoding="utf-8")
    assert rep["files"]["explorer"] == "explorer.html"
    data = _data(page)
    group = data["groups"][0]
    with open(sweep / "configs" / f"top{K}" / "samples_vrh_refcoco_testA.jsonl") as fh:
        lines = {str(r["doc_id"]): r for r in map(json.loads, fh)}
    top = next(c for c in group["configs"] if c["id"] == f"top{K}")
    for i, doc in enumerate(group["docs"]["id"]):
        record = lines[doc]["vrh_record"]
        assert group["docs"]["expr"][i] == record["expression"]
        assert group["docs"]["gt"][i] == record["gt_box"]
        assert top["box"][i] == record["pred_box"]
        assert top["raw"][i] == record["raw"]
        assert top["score"][i] == float(record["correct"])
    assert top["heads"] == ["L0H1", "L2H3", "L3H0"]


def test_what_runs_name_stays_text(report):
    out, _ = report
    page = (out / "explorer.html").read_text(encoding="utf-8")
    assert HOSTILE not in page and "<img" not in page and "<b>" not in page  # nowhere as markup
    assert _data(page)["groups"][0]["docs"]["expr"][0] == HOSTILE  # and whole as data
    assert "innerHTML" not in page and "insertAdjacentHTML" not in page and "eval(" not in page
    assert json.loads(json_block({"s": HOSTILE + "\u2028"}))["s"] == HOSTILE + "\u2028"
    assert not set("<>&") & set(json_block({"s": HOSTILE}))


def test_csp_allows_exactly_the_page_own_script_and_style(report):
    out, _ = report
    page = (out / "explorer.html").read_text(encoding="utf-8")
    csp = html.unescape(re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1))
    script = re.search(r"<script>(.*?)</script>", page, re.S).group(1)
    style = re.search(r"<style>(.*?)</style>", page, re.S).group(1)

    def digest(text: str) -> str:
        return base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()

    assert f"script-src 'sha256-{digest(script)}'" in csp and f"style-src 'sha256-{digest(style)}'" in csp
    assert csp.startswith("default-src 'none'") and "img-src data:" in csp and "unsafe" not in csp


def test_explore_refreshes_the_page(report, capsys):
    out, _ = report
    page = out / "explorer.html"
    page.unlink()
    assert main(["explore", str(out)]) == 0
    assert page.is_file() and "explorer.html" in capsys.readouterr().out
    assert main(["explore", str(out.parent / "missing")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_explore_a_heads_file_alone(tmp_path, capsys):
    heads = Path(__file__).resolve().parents[2] / "reports" / "demo" / "heads.json"
    assert main(["explore", str(heads)]) == 2 and "give --output" in capsys.readouterr().err
    out = tmp_path / "heads_explorer.html"
    assert main(["explore", str(heads), "--output", str(out)]) == 0
    data = _data(out.read_text(encoding="utf-8"))
    assert data["groups"] == [] and len(data["heads_files"]) == 1
    assert set(data["heads_files"][0]["cells"]) == set(json.loads(heads.read_text())["cells"]) | {"out,sum,mean"}
    assert main(["explore", str(tmp_path)]) == 2 and "no report.json" in capsys.readouterr().err


def test_explore_finds_the_sample_files_of_a_moved_run(sweep, tmp_path):
    import shutil

    first = tmp_path / "first"
    shutil.copytree(sweep, first / "sweep")
    build_report([first / "sweep"], first / "report", ReportSettings(n_resamples=200, plots=False))
    moved = tmp_path / "elsewhere" / "run"
    moved.parent.mkdir()
    shutil.move(first, moved)
    (moved / "sweep").rename(moved / "renamed_sweep")
    (moved / "report" / "explorer.html").unlink()
    assert main(["explore", str(moved)]) == 0
    data = _data((moved / "report" / "explorer.html").read_text(encoding="utf-8"))
    group = data["groups"][0]
    assert len(group["docs"]["id"]) > 0 and all("score" in c for c in group["configs"]) and not data["notes"]
    assert group["docs"]["expr"][0] == HOSTILE


def test_sample_files_that_are_gone_are_named_not_invented(sweep, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(sweep, run / "sweep")
    build_report([run / "sweep"], run / "report", ReportSettings(n_resamples=200, plots=False))
    (run / "sweep" / "configs" / "random3_s1" / "samples_vrh_refcoco_testA.jsonl").unlink()
    assert main(["explore", str(run)]) == 0
    data = _data((run / "report" / "explorer.html").read_text(encoding="utf-8"))
    (note,) = [n for n in data["notes"] if "sample files" in n]
    assert "of 1 configuration(s)" in note and "random3_s1" in note
    gone = next(c for c in data["groups"][0]["configs"] if c["id"] == "random3_s1")
    assert gone.get("missing") and "score" not in gone
    shutil.rmtree(run / "sweep" / "configs" / "baseline")
    assert main(["explore", str(run)]) == 0
    data = _data((run / "report" / "explorer.html").read_text(encoding="utf-8"))
    assert data["groups"][0]["docs"]["id"] == [] and any("docs are left out" in n for n in data["notes"])


@pytest.mark.browser
@pytest.mark.skipif(not find_chromium(), reason="no Chromium here (Debian: apt-get install chromium)")
def test_hostile_names_render_as_text_in_chromium(report):
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
    out, _ = report
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=find_chromium(), args=["--no-sandbox"])
        page = browser.new_page()
        errors = []
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto((out / "explorer.html").resolve().as_uri())
        page.wait_for_selector("body[data-ready=true]")
        item = page.locator('[data-doc-item="0"]')
        assert HOSTILE in item.inner_text()
        item.click()
        assert HOSTILE in page.locator('[data-doc="0"] .expression').inner_text()
        assert page.locator("img").count() == 0 and page.locator("b").count() == 0
        assert page.title() != "1" and errors == []
        browser.close()


def test_committed_demo_explorer_is_whole_small_and_names_no_local_path():
    page = Path(__file__).resolve().parents[2] / "reports" / "demo" / "report" / "explorer.html"
    if not page.is_file():
        pytest.skip("reports/demo holds no explorer.html")
    assert page.stat().st_size < 10 * 1024 * 1024
    text = page.read_text(encoding="utf-8")
    data = _data(text)
    assert data["doc_views"]["maps"]["docs"]
    assert len(data["doc_views"]["images"]) == len(data["groups"][0]["docs"]["id"])

    def strings(value):
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for v in value.values():
                yield from strings(v)
        elif isinstance(value, list):
            for v in value:
                yield from strings(v)

    assert not [s for s in strings(data) if s.startswith(("/", "~/", "../"))]
