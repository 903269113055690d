"""report.html: the report as one self-contained page that opens in a browser and can be sent as it is.

The page is rendered from the markdown files themselves (report.md; the demo puts its verdict, demo_summary.md, in
front), by the `markdown` package, so it says exactly what they say. Every image is embedded as a data URI and the
style sheet is inline: the page needs no other file and loads nothing from the network. The page is safe to open
whatever the runs named: raw HTML in the markdown is shown as text, links that leave the report folder are dropped,
and only PNGs the report wrote under its own folder are embedded (docs/contracts.md, "Escaping in reports").
"""

from __future__ import annotations

import base64
import html
import json
import mimetypes
import re
from collections.abc import Collection, Sequence
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import markdown
from markdown.extensions import Extension
from markdown.treeprocessors import Treeprocessor

from vrh_lmms.base import atomic
from vrh_lmms.base.errors import VRHError

HTML_NAME = "report.html"
PATCH_MAP = "plots/patch_map.png"  # where `report --patch` copies the patching map (vrh_lmms.report.interventions)

STYLE = """
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1f2328; background: #fff;
       margin: 0; }
main { max-width: 1200px; margin: 0 auto; padding: 24px 32px 64px; }
section + section { border-top: 1px solid #d0d7de; margin-top: 32px; }
h1 { font-size: 1.7em; border-bottom: 1px solid #d0d7de; padding-bottom: .3em; }
h2 { font-size: 1.3em; margin-top: 1.6em; }
.table { overflow-x: auto; margin: 12px 0; }
table { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
td { white-space: nowrap; }
th { background: #f6f8fa; }
tr:nth-child(even) td { background: #fbfcfd; }
img { max-width: 100%; height: auto; display: block; margin: 12px 0; border: 1px solid #eaeef2; }
code { background: #f6f8fa; padding: 1px 4px; border-radius: 4px; font-size: 90%; }
p > strong:first-child { color: #0b3d91; }
"""


def _data_uri(path: Path) -> str:
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


# What the page keeps of the markdown's HTML: the elements markdown itself makes, with these attributes only.
_TAGS = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li", "table", "thead", "tbody", "tr", "th", "td",
         "strong", "em", "code", "pre", "a", "img", "blockquote", "hr", "br", "div", "span"}
_ATTRIBUTES = {"a": {"href", "title"}, "img": {"src", "alt", "title"}, "th": {"style"}, "td": {"style"},
               "ol": {"start"}}
_ALIGN = re.compile(r"text-align: (left|right|center);")
_PNG = b"\x89PNG\r\n\x1a\n"


def local_target(target: str) -> PurePosixPath | None:
    """`target` as a path inside the report's folder (relative, no scheme, no way up), else None: every link and
    image the page keeps points there."""
    if not target or any(c in "\\&" or ord(c) < 32 or ord(c) == 127 for c in target) or target.strip() != target:
        return None
    if target.startswith("#") and ":" not in target:  # an anchor in the page itself
        return PurePosixPath(".")
    path = target.split("#", 1)[0].split("?", 1)[0]
    if not path or urlsplit(target).scheme or urlsplit(target).netloc or path.startswith("/"):
        return None
    parts = PurePosixPath(path).parts
    if ".." in parts or any(":" in part for part in parts):
        return None
    return PurePosixPath(path)


def _own_image(src: str, base: Path, images: Collection[str] | None) -> Path | None:
    """The file an <img src> names when the report wrote it under `base` (one of `images`, or under plots/ when no
    list is given), is a PNG and resolves inside `base`; None otherwise (a name from a run never embeds a file)."""
    rel = local_target(src)
    if rel is None:
        return None
    if images is not None and rel.as_posix() not in {PurePosixPath(i).as_posix() for i in images}:
        return None
    if images is None and rel.parts[:1] != ("plots",):
        return None
    root = base.resolve()
    path = (base / rel).resolve()
    if not path.is_relative_to(root):
        return None
    if not path.is_file():
        raise VRHError(f"the report's image {src} is missing from {base}; rebuild the report")
    with path.open("rb") as fh:
        return path if fh.read(len(_PNG)) == _PNG else None


def _sanitising_extension(base: Path, images: Collection[str] | None):
    """A markdown extension that makes the page safe to open: raw HTML is shown as text (never parsed), elements
    and attributes outside what markdown makes are dropped, links that leave the report folder become plain text,
    and only the report's own PNGs are embedded (as data URIs); any other image becomes its alt text."""
    class Sanitise(Treeprocessor):
        def run(self, root):
            for parent in list(root.iter()):
                for el in list(parent):
                    if el.tag not in _TAGS:
                        parent.remove(el)
            for el in root.iter():
                allowed = _ATTRIBUTES.get(el.tag, set())
                for name in list(el.attrib):
                    if name not in allowed or (name == "style" and not _ALIGN.fullmatch(el.attrib[name])):
                        del el.attrib[name]
                if el.tag == "a" and local_target(el.get("href", "")) is None:
                    el.tag, el.attrib = "span", {}
                elif el.tag == "img":
                    src = el.get("src", "")
                    path = _own_image(src, base, images)
                    if path is None:
                        alt = el.get("alt", "")
                        el.tag, el.attrib = "span", {}
                        el.text = f"[image not embedded: {alt or src}]"
                    else:
                        el.set("src", _data_uri(path))
                        el.set("title", src)

    class Sanitised(Extension):
        def extendMarkdown(self, md):  # noqa: N802 (markdown's API)
            md.preprocessors.deregister("html_block")  # raw HTML blocks stay text
            md.inlinePatterns.deregister("html")  # and so do inline tags
            for name in ("autolink", "automail"):  # <http://...> and <a@b.c> links lead out of the report
                md.inlinePatterns.deregister(name)
            md.treeprocessors.register(Sanitise(md), "vrh_sanitise", -10)  # after "unescape" (0)

    return Sanitised()


def markdown_to_html(text: str, base: str | Path, images: Collection[str] | None = None) -> str:
    """One markdown document as a safe HTML fragment: tables kept, the report's own images (`images`, relative to
    `base`; None: its plots/ folder) embedded, wide tables scrollable."""
    body = markdown.markdown(text, extensions=["tables", "sane_lists", _sanitising_extension(Path(base), images)],
                             output_format="html")
    return body.replace("<table>", '<div class="table"><table>').replace("</table>", "</table></div>")


Part = tuple[str, str | Path] | tuple[str, str | Path, Collection[str] | None]


def render_page(parts: Sequence[Part], title: str) -> str:
    """The page: one <section> per (markdown text, folder its image paths are relative to[, the images it wrote
    there]), in order."""
    sections = "\n".join(f"<section>\n{markdown_to_html(*part)}\n</section>" for part in parts)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n{sections}\n"
            f"</main>\n</body>\n</html>\n")


def own_images(report_dir: Path) -> list[str]:
    """The pictures the report wrote: its plots and the attention maps it copied, as its report.json lists them, and
    the patching map that `report --patch` copies beside interventions.md; nothing else in its folder is embedded."""
    path = report_dir / "report.json"
    report = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    maps = (report.get("maps") or {}).get("maps") or []
    patched = [PATCH_MAP] if (report_dir / "interventions.md").is_file() else []
    return [*(report.get("files") or {}).get("plots", []), *(m["png"] for m in maps), *patched]


def write_report_html(report_dir: str | Path, before: Sequence[Part] = (),
                      title: str = "Visual retrieval heads: ablation report") -> Path:
    """Write `report_dir`/report.html from its report.md, with `before` (e.g. the demo's verdict) in front."""
    report_dir = Path(report_dir)
    text = (report_dir / "report.md").read_text(encoding="utf-8")
    page = render_page([*before, (text, report_dir, own_images(report_dir))], title)
    return atomic.write_text(report_dir / HTML_NAME, page)
