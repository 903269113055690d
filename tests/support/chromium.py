"""Render an HTML page in headless Chromium (Debian packages chromium + chromium-driver; .ci/run installs them):
a screenshot, and what the browser made of every <img> (decoded size, laid-out width)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--hide-scrollbars", "--virtual-time-budget=15000"]
SKIP_REASON = ("headless Chromium is not installed (Debian: apt-get install chromium chromium-driver; .ci/run does "
               "it), so report.html is not rendered here")

# Run at the load event (images decoded): one record per <img> in a <pre id="vrh-check">, read back by --dump-dom:
# its decoded and laid-out sizes, and the share of its pixels that are drawn and not white once painted on a canvas
# (a truncated PNG still has a natural size; its missing rows are transparent).
PROBE = """<script>
window.addEventListener("load", () => {
  const ink = (i) => {  // share of the decoded picture's pixels that are drawn and not white
    if (!i.naturalWidth || !i.naturalHeight) return 0;
    const c = document.createElement("canvas");
    c.width = 400; c.height = Math.max(1, Math.round(400 * i.naturalHeight / i.naturalWidth));
    const g = c.getContext("2d");
    g.drawImage(i, 0, 0, c.width, c.height);
    const d = g.getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let p = 0; p < d.length; p += 4) if (d[p + 3] > 128 && d[p] + d[p + 1] + d[p + 2] < 720) n++;
    return n / (d.length / 4);
  };
  const imgs = Array.from(document.images).map(i => ({title: i.getAttribute("title"), complete: i.complete,
    width: i.naturalWidth, height: i.naturalHeight, shown: i.getBoundingClientRect().width,
    shown_height: i.getBoundingClientRect().height, ink: ink(i)}));
  const pre = document.createElement("pre");
  pre.id = "vrh-check";
  pre.textContent = JSON.stringify(imgs);
  const page = document.createElement("pre");  // measured before the records are added (they are long lines)
  page.id = "vrh-page";
  page.textContent = JSON.stringify({scroll_width: document.documentElement.scrollWidth,
    inner_width: window.innerWidth});
  document.body.appendChild(page);
  document.body.appendChild(pre);
});
</script>"""


def find_chromium() -> str | None:
    return next((path for path in map(shutil.which, NAMES) if path), None)


@dataclass
class Rendering:
    screenshot: Path
    images: list[dict]
    page: dict  # scroll_width (the laid-out page, wider than the window where something overflows), inner_width


def _run(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([binary, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=180)


def render(page: Path, work: Path, width: int = 1280, height: int = 2000) -> Rendering:
    """Screenshot `page` at width x height, and read back its images as the browser decoded and laid them out."""
    binary = find_chromium()
    assert binary, SKIP_REASON
    work.mkdir(parents=True, exist_ok=True)
    shot = work / "screenshot.png"
    proc = _run(binary, work / "profile-shot", f"--window-size={width},{height}", f"--screenshot={shot}",
                page.resolve().as_uri())
    assert shot.is_file(), proc.stderr[-2000:]
    probed = work / "probed.html"
    text = page.read_text(encoding="utf-8")
    probed.write_text(text.replace("</body>", PROBE + "\n</body>"), encoding="utf-8")
    proc = _run(binary, work / "profile-dom", f"--window-size={width},{height}", "--dump-dom", probed.as_uri())
    found = re.search(r'<pre id="vrh-check">(.*?)</pre>', proc.stdout, re.S)
    page = re.search(r'<pre id="vrh-page">(.*?)</pre>', proc.stdout, re.S)
    assert found and page, f"the probe did not run: {proc.stderr[-2000:]}"
    import html

    return Rendering(shot, json.loads(html.unescape(found.group(1))), json.loads(html.unescape(page.group(1))))


def assert_fits_the_page(rendering: Rendering, max_natural: int = 2400, min_scale: float = 0.5) -> None:
    """Nothing wider than the window (no sideways scrolling), and every picture readable at page width: at most
    `max_natural` px wide and shown at no less than `min_scale` of its own size (a 3,800 px plot squeezed into a
    1,200 px column is shown at a third)."""
    assert rendering.page["scroll_width"] <= rendering.page["inner_width"], rendering.page
    for img in rendering.images:
        assert img["width"] <= max_natural, img
        assert img["shown"] >= min_scale * min(img["width"], rendering.page["inner_width"]), img


def ink(screenshot: Path) -> tuple[tuple[int, int], float, int]:
    """(size, share of pixels that are not the page's white, number of distinct colours) of a screenshot."""
    from PIL import Image

    with Image.open(screenshot) as im:
        rgb = np.asarray(im.convert("RGB")).astype(int)
        size = im.size
    inked = (np.abs(rgb - 255).sum(axis=2) > 30).mean()
    colours = len(np.unique(rgb.reshape(-1, 3) // 8, axis=0))
    return size, float(inked), colours
