"""explorer.html: one self-contained page to explore a report's runs, written beside report.html.

What it shows (docs/reports.md, "The explorer"): the layer x head map of discovery scores (any scoring cell of the
heads file), each head's attention over sample images with the ground-truth box, its rank and score and the
configurations that ablate it; each doc with its image, expression, ground-truth box, every configuration's answer
box and raw answer; filters for the docs top-k breaks and its random controls do not (and the reverse); the k-curve
and the drops with their intervals; two runs (two models, or two heads files) side by side.

Safe to open whatever the runs named: the data sit in a `<script type="application/json">` block (with `<`, `>` and
`&` escaped, so no string can end it), the page's own script reads it with JSON.parse and builds every element with
textContent, and a Content-Security-Policy allows only the page's own script and style (by hash) and data: images:
no request leaves the page. The script and the style sheet are files beside this module (explorer_page/).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from matplotlib.colors import to_hex

from vrh_lmms.base import atomic
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import kinds
from vrh_lmms.report.explorer_data import DOC_VIEWS, explorer_data, resolve

EXPLORER_NAME = "explorer.html"
DEMO_LIMIT = 10 * 1024 * 1024  # the demo's page stays under 10 MB (tests/browser)


def _asset(name: str) -> str:
    return resources.files("vrh_lmms.report").joinpath("explorer_page", name).read_text(encoding="utf-8")


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def _finite(value: Any) -> Any:
    """NaN and infinities as null (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def json_block(data: Any) -> str:
    """JSON that is safe inside a <script> element: no `<`, `>` or `&` (so no `</script>` or `<!--`), and no
    U+2028/U+2029."""
    text = json.dumps(_finite(data), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                          ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return text


def kind_table() -> dict[str, dict[str, Any]]:
    """The head-set kinds as the page names and colours them (vrh_lmms.base.heads.kinds: one record per kind)."""
    out = {}
    for k in kinds.KINDS:
        colour = to_hex(k.colour) if k.colour else "#6e7781"
        out[k.name] = {"legend": k.legend or ("top-k" if k.name == "topk" else k.name.replace("_", " ")),
                       "colour": colour, "control": bool(k.control)}
    return out


def render_explorer(data: dict[str, Any]) -> str:
    """The page: the data block, the script and the style inline, a CSP that allows only those two."""
    script, style = _asset("explorer.js"), _asset("explorer.css")
    if "</script" in script.lower() or "</style" in style.lower():
        raise VRHError("the explorer's own script or style closes its element early")
    csp = (f"default-src 'none'; script-src {_csp_hash(script)}; style-src {_csp_hash(style)}; img-src data:; "
           "base-uri 'none'; form-action 'none'")
    title = html.escape(str(data.get("title", "vrh-lmms explorer")))
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{html.escape(csp)}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{title}</title>\n<style>{style}</style>\n</head>\n<body>\n"
        '<header>\n<h1 id="title"></h1>\n<p class="sub" id="subtitle"></p>\n<div class="controls">'
        '<label for="run-a">run</label><select id="run-a"></select>'
        '<label for="run-b">side by side with</label><select id="run-b"></select></div>\n</header>\n'
        '<main id="panes"></main>\n<section id="notes"></section>\n<div class="tip" id="tip" hidden></div>\n'
        f'<script type="application/json" id="explorer-data">{json_block(data)}</script>\n'
        f"<script>{script}</script>\n</body>\n</html>\n")


def _heads_paths(report: dict, roots: Sequence[Path]) -> list[Path]:
    """The heads files the report names (its --heads-file list, then those its configurations name), found here."""
    names = [h.get("path") for h in report.get("heads_files") or []]
    for group in report.get("groups") or []:
        names += [(c.get("heads_file") or {}).get("path") for c in group.get("configs") or []]
    found = [resolve(n, roots) for n in dict.fromkeys(n for n in names if n)]
    return [p for p in found if p is not None]


def write_heads_explorer(heads_files: Sequence[str | Path], output: str | Path, title: str | None = None) -> Path:
    """A page of heads files alone (a discovery, before any sweep): the layer x head map of every scoring cell, side
    by side where there are several; nothing is ablated, so no docs and no drops."""
    paths = [Path(p) for p in heads_files]
    data = explorer_data({"groups": []}, [], paths, [], title or f"vrh-lmms explorer: {', '.join(map(str, paths))}")
    data["kinds"] = kind_table()
    return atomic.write_text(Path(output), render_explorer(data))


def write_explorer(report_dir: str | Path, roots: Sequence[str | Path] = (), title: str | None = None) -> Path:
    """Write `report_dir`/explorer.html from its report.json and the files it names. `roots`: folders where the
    run's files are looked for when report.json's paths (relative to where the report ran) do not lead to them (a
    run folder, its sweeps); the doc views (vrh_lmms.runs.maps.doc_views) come from `<root>/doc_views`."""
    report_dir = Path(report_dir)
    path = report_dir / "report.json"
    if not path.is_file():
        raise VRHError(f"{report_dir} holds no report.json; run `vrh-lmms report` first")
    report = json.loads(path.read_text(encoding="utf-8"))
    folders = [Path(r) for r in roots] + [report_dir.parent, report_dir]
    # the run folders, their parents and their subfolders (a demo's sweep/, a moved sweep)
    near = [f for f in folders if f.is_dir()]
    search = list(dict.fromkeys([*folders, *(f.parent for f in folders),
                                 *(sub for f in near for sub in sorted(f.iterdir()) if sub.is_dir())]))
    doc_views = [f / DOC_VIEWS for f in search]
    models = sorted({g["model"] for g in report.get("groups") or []})
    data = explorer_data(report, search, _heads_paths(report, search), doc_views,
                         title or f"vrh-lmms explorer: {', '.join(models) or 'no runs'}")
    data["kinds"] = kind_table()
    return atomic.write_text(report_dir / EXPLORER_NAME, render_explorer(data))
