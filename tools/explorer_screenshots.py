"""Screenshots of a demo's explorer for reports/demo/README.md, taken with headless Chromium through Playwright.

    python tools/explorer_screenshots.py reports/demo/report/explorer.html reports/demo

writes explorer.png (the head map with the top-ranked head clicked, its attention over the sample scenes, the
k-curve) and explorer_docs.png (the docs top-k breaks and live random-k does not, the first one open with its boxes).
A developer tool beside the package (not in the wheel).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

from playwright.sync_api import sync_playwright


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path, help="an explorer.html")
    parser.add_argument("out", type=Path, help="folder for explorer.png and explorer_docs.png")
    parser.add_argument("--width", type=int, default=1400, help="window width in px (default 1400)")
    args = parser.parse_args()
    text = args.page.read_text(encoding="utf-8")
    data = json.loads(re.search(r'id="explorer-data">(.*?)</script>', text, re.S).group(1))
    top = data["heads_files"][0]["cells"][data["heads_files"][0]["primary"]]["ranking"][0]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": args.width, "height": 1300})
        errors: list[str] = []
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.goto(args.page.resolve().as_uri())
        page.wait_for_selector("body[data-ready=true]")
        page.click(f'[data-pane="a"] [data-head="{top}"]')
        page.mouse.move(5, 5)
        page.screenshot(path=args.out / "explorer.png", clip={"x": 0, "y": 0, "width": args.width, "height": 1250})
        pane = page.locator('[data-pane="a"]')
        pane.locator('[data-filter="topk_only"] input').check()
        pane.locator("[data-doc-item]").first.click()
        section = pane.locator(".docs-section").element_handle()
        y = page.evaluate("(e) => e.getBoundingClientRect().top + window.scrollY", section)
        height = page.evaluate("(e) => e.getBoundingClientRect().height", section)
        page.screenshot(path=args.out / "explorer_docs.png", full_page=True,
                        clip={"x": 0, "y": y, "width": args.width, "height": min(height, 820)})
        browser.close()
    if errors:
        raise SystemExit(f"the page logged errors: {errors}")
    print(f"wrote {args.out / 'explorer.png'} and {args.out / 'explorer_docs.png'} ({top} clicked)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
