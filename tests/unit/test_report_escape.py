"""The two layers that keep a run's names data in reports: `vrh_lmms.base.escape.md` (markdown that reads back as the
very text, checked by rendering it with Python-Markdown, the renderer of report.html) and the HTML renderer's sanitising
(raw HTML shown as text, links out of the report folder dropped, only the report's own PNGs embedded), checked on
markdown that was never escaped, as an older report.md or a hand-edited one would hold."""

from __future__ import annotations

import base64
import os
from html.parser import HTMLParser

import numpy as np
import pytest

from vrh_lmms.base.escape import md, md_code, md_url
from vrh_lmms.base.paths import shown_model, shown_path
from vrh_lmms.report.html import markdown_to_html

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9aw"
                       "AAAABJRU5ErkJggg==")  # a 1 x 1 picture
SPECIAL = "\\`*_[]()!|&<>#~+-.:;=\"' /\n\tabcXYZ019"


class Parsed(HTMLParser):
    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.cells: list[str] = []
        self.data: list[str] = []
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.cells.append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        self.data.append(data)
        if self._cell is not None:
            self._cell.append(data)

    @property
    def text(self) -> str:
        return "".join(self.data)


def _as_read(text: str) -> str:
    return " ".join(text.replace("\r\n", "\n").replace("\r", "\n").split())


@pytest.mark.parametrize("seed", range(40))
def test_md_reads_back_as_the_text_in_a_paragraph_and_in_a_table_cell(seed, tmp_path):
    """Random strings over markdown's special characters: rendered (paragraph, table cell) they read as the string
    itself, whitespace aside, with no element markdown made of them."""
    rng = np.random.default_rng(seed)
    value = "".join(rng.choice(list(SPECIAL), size=int(rng.integers(1, 30))))
    para = Parsed(markdown_to_html(f"x {md(value)} y", tmp_path))
    assert _as_read(para.text) == _as_read(f"x {value} y")
    assert [t for t, _ in para.tags] == ["p"]
    table = Parsed(markdown_to_html(f"| a | b |\n|---|---|\n| {md(value)} | z |", tmp_path))
    assert [_as_read(c) for c in table.cells] == ["a", "b", _as_read(value), "z"]


def test_ordinary_names_are_left_as_they_are():
    for name in ("Qwen2.5-VL-7B-Instruct", "vrh_refcoco_val", "top20@Qwen2.5-VL-3B", "out,sum,mean", "L12H3",
                 "random5_s0", "runs/demo/heads.json", "~/models/x"):
        assert md(name) == name
    assert md_code("out,sum,mean") == "`out,sum,mean`" and md_code("a`b") == "a\\`b" and md_code("a|b") == "a\\|b"
    assert md_url("maps/map a(1).png") == "maps/map%20a%281%29.png"


def test_shown_paths_are_never_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert shown_path(tmp_path / "runs" / "x") == "runs/x"
    assert shown_path(os.path.expanduser("~/ckpt")) in ("~/ckpt", os.path.relpath(os.path.expanduser("~/ckpt")))
    outside = shown_path("/opt/models/m")
    assert not outside.startswith("/") and os.path.normpath(tmp_path / outside) == "/opt/models/m"
    assert shown_model("Qwen/Qwen2.5-VL-7B-Instruct") == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert shown_model(str(tmp_path / "ckpt")) == "ckpt"


def test_raw_html_links_and_pictures_of_unescaped_markdown_are_made_safe(tmp_path):
    """Markdown nobody escaped: tags with handlers and scripts stay text, links out of the folder lose their href,
    and only the listed PNG under the folder is embedded (not a file outside, a `..` path, a symlink out of the
    folder, a PNG the report did not write, a non-PNG, or a data: URI)."""
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "own.png").write_bytes(PNG)
    (tmp_path / "plots" / "other.png").write_bytes(PNG)
    (tmp_path / "plots" / "text.png").write_text("not a png")
    outside = tmp_path.parent / f"{tmp_path.name}_secret.png"
    outside.write_bytes(PNG)
    (tmp_path / "plots" / "link.png").symlink_to(outside)
    text = "\n\n".join([
        "<img src=x onerror=alert(1)>", "<script>alert(1)</script>", "a <b onclick=alert(1)>b</b> <iframe src=x>",
        "[js](javascript:alert(1)) [web](https://example.com) [data](data:text/html,x) [file](/etc/passwd) "
        "[up](../x.md) <https://example.com> <a@b.c> [ok](plots/own.png) [anchor](#top)",
        f"![own](plots/own.png) ![other](plots/other.png) ![abs]({outside}) ![up](../{outside.name}) "
        "![link](plots/link.png) ![text](plots/text.png) ![data](data:image/png;base64,AAAA) ![etc](/etc/passwd)",
        "| a | b |\n|---|---|\n| <script>x</script> | <img src=y onerror=z> |"])
    page = Parsed(markdown_to_html(text, tmp_path, images=["plots/own.png", "plots/text.png", "plots/link.png"]))
    tags = [t for t, _ in page.tags]
    assert not set(tags) & {"script", "iframe", "b"}
    assert all(not k.startswith("on") for _, attrs in page.tags for k in attrs)
    assert [a["href"] for t, a in page.tags if t == "a"] == ["plots/own.png", "#top"]
    images = [a for t, a in page.tags if t == "img"]
    assert [a["title"] for a in images] == ["plots/own.png"]
    assert base64.b64decode(images[0]["src"].split(",", 1)[1]) == PNG
    for shown_text in ("<img src=x onerror=alert(1)>", "<script>alert(1)</script>", "<iframe src=x>", "js", "web",
                       "<https://example.com>", "[image not embedded: other]", "[image not embedded: abs]",
                       "[image not embedded: link]", "[image not embedded: text]", "[image not embedded: etc]"):
        assert shown_text in page.text, shown_text
    assert page.cells == ["a", "b", "<script>x</script>", "<img src=y onerror=z>"]
