"""report.html: the report as one self-contained page that opens in a browser and can be sent as it is.

The page is rendered from the markdown files themselves (report.md; the demo puts its verdict, demo_summary.md, in
front), by the `markdown` package, so it says exactly what they say. Every image is embedded as a data URI and the
style sheet is inline: the page needs no other file and loads nothing from the network.
"""

from __future__ import annotations

import base64
import html
import mimetypes
from collections.abc import Sequence
from pathlib import Path

from vrh_lmms.base import atomic
from vrh_lmms.base.errors import VRHError

HTML_NAME = "report.html"

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


def _embedding_extension(base: Path):
    """A markdown extension that replaces every local <img src> by the file's data URI (relative to `base`)."""
    from markdown.extensions import Extension
    from markdown.treeprocessors import Treeprocessor

    class EmbedImages(Treeprocessor):
        def run(self, root):
            for img in root.iter("img"):
                src = img.get("src", "")
                if src.startswith("data:"):
                    continue
                path = base / src
                if not path.is_file():
                    raise VRHError(f"the report's image {src} is missing from {base}; rebuild the report")
                img.set("src", _data_uri(path))
                img.set("title", src)

    class Embed(Extension):
        def extendMarkdown(self, md):  # noqa: N802 (markdown's API)
            md.treeprocessors.register(EmbedImages(md), "vrh_embed_images", 0)

    return Embed()


def markdown_to_html(text: str, base: str | Path) -> str:
    """One markdown document as an HTML fragment: tables kept, images embedded, wide tables scrollable."""
    import markdown

    body = markdown.markdown(text, extensions=["tables", "sane_lists", _embedding_extension(Path(base))],
                             output_format="html")
    return body.replace("<table>", '<div class="table"><table>').replace("</table>", "</table></div>")


def render_page(parts: Sequence[tuple[str, str | Path]], title: str) -> str:
    """The page: one <section> per (markdown text, folder its image paths are relative to), in order."""
    sections = "\n".join(f"<section>\n{markdown_to_html(text, base)}\n</section>" for text, base in parts)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n{sections}\n"
            f"</main>\n</body>\n</html>\n")


def write_report_html(report_dir: str | Path, before: Sequence[tuple[str, str | Path]] = (),
                      title: str = "Visual retrieval heads: ablation report") -> Path:
    """Write `report_dir`/report.html from its report.md, with `before` (e.g. the demo's verdict) in front."""
    report_dir = Path(report_dir)
    text = (report_dir / "report.md").read_text(encoding="utf-8")
    page = render_page([*before, (text, report_dir)], title)
    return atomic.write_text(report_dir / HTML_NAME, page)
