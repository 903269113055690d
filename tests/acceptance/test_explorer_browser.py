"""The demo's explorer (report/explorer.html) in a real browser: Playwright for Python driving the system's Chromium,
the page opened from file://. Nothing leaves the page, nothing logs an error, a head click shows that head's saved
attention, a doc shows its boxes where the sample files put them, the filter counts are report.json's, and the page
works from the keyboard. Skipped, in one line, where no Chromium or no Playwright is installed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.chromium import find_chromium
from support.demo_runs import run_demo_cli

from vrh_lmms.base.paths import assets_path
from vrh_lmms.pipelines.demo.pipeline import TASK

MODEL = assets_path() / "demo_model"
playwright_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not find_chromium(), reason="no Chromium here (Debian: apt-get install chromium)"),
              pytest.mark.skipif(not (MODEL / "config.json").is_file(), reason="no shipped demo model")]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "run"
    run_demo_cli(out, "--n-eval", "24", "--n-discovery", "16")  # a small run: the page, not the figures, is tested
    return out


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=find_chromium(), args=["--no-sandbox"])
        yield chromium
        chromium.close()


class Watched:
    """A page with every request, console error and page error recorded; requests other than the page itself and
    data: URIs are aborted (and recorded)."""

    def __init__(self, browser, url: str) -> None:
        self.url, self.requests, self.errors = url, [], []
        self.context = browser.new_context(viewport={"width": 1400, "height": 1000})
        self.page = self.context.new_page()
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.route("**/*", lambda route: route.continue_() if route.request.url == url else route.abort())
        self.page.goto(url)
        self.page.wait_for_selector("body[data-ready=true]", timeout=30_000)

    def left_page(self) -> list[str]:
        return [u for u in self.requests if u != self.url and not u.startswith("data:")]


@pytest.fixture
def explorer(demo_run, browser):
    page = demo_run / "report" / "explorer.html"
    watched = Watched(browser, page.resolve().as_uri())
    yield watched
    watched.context.close()


def records(path: Path) -> dict[str, dict]:
    with open(path) as f:
        return {str(r["doc_id"]): r["vrh_record"] for r in map(json.loads, f)}


def test_opens_offline_small_and_without_errors(demo_run, explorer):
    page = explorer.page
    assert (demo_run / "report" / "explorer.html").stat().st_size < 10 * 1024 * 1024
    heads = json.loads((demo_run / "heads.json").read_text())
    geometry = heads["geometry"]
    cells = page.locator('[data-pane="a"] [data-head]')
    assert cells.count() == geometry["layers"] * geometry["heads"]
    assert cells.first.is_visible()  # the map is there when the page opens
    page.mouse.move(300, 300)
    assert explorer.left_page() == [] and explorer.errors == []
    csp = page.locator('meta[http-equiv="Content-Security-Policy"]').get_attribute("content")
    assert "default-src 'none'" in csp and "img-src data:" in csp and "unsafe" not in csp


def test_a_head_click_shows_its_saved_attention(demo_run, explorer):
    page = explorer.page
    head = json.loads((demo_run / "heads.json").read_text())["ranking"][0]
    layer, index = (int(v) for v in head[1:].split("H"))
    page.click(f'[data-pane="a"] [data-head="{head}"]')
    overlay = page.locator(f'[data-pane="a"] [data-overlay="{head}"]')
    overlay.wait_for(state="visible")
    assert page.locator(f'[data-pane="a"] [data-head="{head}"]').get_attribute("aria-pressed") == "true"
    assert "rank 1 of" in overlay.inner_text()
    saved = json.loads((demo_run / "doc_views" / "head_maps.json").read_text())
    figures = overlay.locator("figure")
    assert figures.count() == len(saved["docs"]) > 0
    with np.load(demo_run / "doc_views" / "head_maps.npz") as npz:
        for i, doc in enumerate(saved["docs"]):
            grid = npz[doc["key"]][layer, index].astype(float)
            fig = overlay.locator(f'figure[data-map-doc="{doc["doc_id"]}"]')
            assert fig.locator("rect.heat").count() == grid.size
            # the page's brightest cell is the saved map's (the overlay is this head's attention, not another's)
            assert int(fig.get_attribute("data-peak")) == int(np.argmax(grid))
            gt = fig.locator('[data-box="gt"]')
            assert [float(gt.get_attribute(a)) for a in ("x", "y")] == doc["gt_box"][:2]
            assert fig.locator("image").count() == 1  # the scene's thumbnail under the map
    other = "L0H0" if head != "L0H0" else "L0H1"
    page.click(f'[data-pane="a"] [data-head="{other}"]')
    page.locator(f'[data-pane="a"] [data-overlay="{other}"]').wait_for(state="visible")
    assert page.locator(f'[data-pane="a"] [data-overlay="{head}"]').count() == 0
    assert explorer.errors == []


def test_a_doc_shows_its_boxes(demo_run, explorer):
    page = explorer.page
    configs = demo_run / "sweep" / "configs"
    base = records(configs / "baseline" / f"samples_{TASK}.jsonl")
    top = records(configs / "top5" / f"samples_{TASK}.jsonl")
    doc = next(d for d in sorted(base, key=int) if base[d]["correct"] and not top[d]["correct"])
    page.locator(f'[data-pane="a"] [data-doc-item="{doc}"]').click()
    view = page.locator(f'[data-pane="a"] [data-doc="{doc}"]')
    view.wait_for(state="visible")
    assert base[doc]["expression"] in view.inner_text()
    for hook, box in (("gt", base[doc]["gt_box"]), ("baseline", base[doc]["pred_box"]), ("top5", top[doc]["pred_box"])):
        rect = view.locator(f'svg.doc-picture [data-box="{hook}"]')
        assert rect.count() == 1, hook
        x, y, w, h = (float(rect.get_attribute(a)) for a in ("x", "y", "width", "height"))
        assert [x, y, x + w, y + h] == pytest.approx(box, abs=0.01), hook
    raw = view.locator('[data-answer="top5"] td.raw').inner_text()
    assert raw == top[doc]["raw"]
    view.locator('[data-answer="random5_s0"] input').check()  # a draw's box, drawn on demand
    assert view.locator('svg.doc-picture [data-box="random5_s0"]').count() == (1 if records(
        configs / "random5_s0" / f"samples_{TASK}.jsonl")[doc]["pred_box"] else 0)
    head = json.loads((demo_run / "heads.json").read_text())["ranking"][0]
    page.click(f'[data-pane="a"] [data-head="{head}"]')
    saved = {d["doc_id"] for d in json.loads((demo_run / "doc_views" / "head_maps.json").read_text())["docs"]}
    beside = page.locator(f'[data-pane="a"] [data-doc="{doc}"] figure[data-map-doc="{doc}"]')
    assert beside.count() == (1 if int(doc) in saved else 0)  # the doc beside the clicked head's map of it
    assert explorer.errors == []


def test_filter_counts_are_report_json(demo_run, explorer):
    page = explorer.page
    report = json.loads((demo_run / "report" / "report.json").read_text())
    filters = report["groups"][0]["doc_filters"]
    assert filters and any(f["n_topk_only"] for f in filters)
    pane = page.locator('[data-pane="a"]')
    for f in filters:
        pane.locator("[data-filter-topk]").select_option(f["config"])
        pane.locator("[data-filter-control]").select_option(f["control"])
        assert int(pane.locator('[data-count="topk_only"]').inner_text()) == f["n_topk_only"], f
        assert int(pane.locator('[data-count="control_only"]').inner_text()) == f["n_control_only"], f
    last = filters[-1]
    pane.locator('[data-filter="topk_only"] input').check()
    shown = pane.locator("[data-doc-item]").evaluate_all("els => els.map(e => e.dataset.docItem)")
    assert shown == last["topk_only"]
    assert explorer.errors == []


def test_keyboard_navigation(explorer):
    page = explorer.page
    for _ in range(12):  # Tab from the top of the page reaches the head map (one tab stop)
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.dataset.head || ''"):
            break
    start = page.evaluate("document.activeElement.dataset.head")
    assert start, "Tab never reached the head map"
    layer, head = (int(v) for v in start[1:].split("H"))
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowDown")
    moved = page.evaluate("document.activeElement.dataset.head")
    assert moved == f"L{min(layer + 1, 5)}H{min(head + 1, 15)}"
    page.keyboard.press("Enter")
    page.locator(f'[data-pane="a"] [data-overlay="{moved}"]').wait_for(state="visible")
    first = page.locator('[data-pane="a"] [data-doc-item]').first
    first.focus()
    page.keyboard.press("ArrowDown")
    second = page.evaluate("document.activeElement.dataset.docItem")
    assert second and second != first.get_attribute("data-doc-item")
    page.keyboard.press("Enter")
    page.locator(f'[data-pane="a"] [data-doc="{second}"]').wait_for(state="visible")
    assert explorer.errors == []


def test_hover_gives_the_numbers_and_two_runs_sit_side_by_side(demo_run, explorer):
    page = explorer.page
    report = json.loads((demo_run / "report" / "report.json").read_text())
    row = report["groups"][0]["summary"][0]
    point = page.locator(f'[data-pane="a"] [data-point="topk@{row["k"]}"]')
    point.hover()
    tip = page.locator("#tip")
    tip.wait_for(state="visible")
    lo, hi = row["topk_drop_ci"]
    assert f"drop {100 * row['topk_drop']:.1f} points [{100 * lo:.1f}, {100 * hi:.1f}]" in tip.inner_text()
    # the other model x task of the report (the demo's recall step: the text-needle task) beside the first
    other = report["groups"][1]
    page.select_option("#run-b", "g1")
    panes = page.locator("#panes > .pane")
    assert panes.count() == 2
    assert page.locator('[data-pane="b"] h2').inner_text() == f"{other['model']} / {other['task']}"
    assert page.locator('[data-pane="b"] [data-head]').count() == page.locator('[data-pane="a"] [data-head]').count()
    left, right = (panes.nth(i).bounding_box() for i in range(2))
    assert right["x"] >= left["x"] + left["width"] and abs(right["y"] - left["y"]) < 2  # side by side
    page.select_option("#run-b", "")
    assert panes.count() == 1 and explorer.errors == []
