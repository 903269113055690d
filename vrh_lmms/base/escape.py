"""Escaping of run-derived values (model names, paths, tasks, configuration ids, cells, labels, doc ids) for the
markdown the reports write. A value a run names is data: shown as the text it is, it never becomes markup.

`md` is for plain markdown text and table cells alike: it escapes what markdown (Python-Markdown, which renders
report.html, and GitHub) would read as markup (emphasis, code, links, images, raw HTML, entities, table pipes) and
folds line breaks into spaces, so a table row keeps its columns. Ordinary names (letters, digits, `.`, `-`, `/`,
`:`, `_` inside words, spaces) come out unchanged. `md_code` keeps a value in a code span where that is safe.
The HTML page is sanitised on its own as well (vrh_lmms.report.html); these functions keep the markdown right.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

# one character (or an `_` at a word's edge) -> its escaped form; backslash escapes are the CommonMark ones, which
# Python-Markdown (with its tables extension, for `|`) and GitHub both read; `<`, `>`, `&` as entities
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_SPECIAL = re.compile(r"[\\`*\[\]!|&<>#]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|\r\n|[\r\n\u2028\u2029]")


def _escape_one(m: re.Match) -> str:
    ch = m.group(0)
    if ch in _ENTITIES:
        return _ENTITIES[ch]
    if ch in ("\r\n", "\r", "\n", "\u2028", "\u2029"):
        return " "
    return "\\" + ch


def md(value: Any) -> str:
    """`value` as markdown text that reads back as exactly `str(value)` (line breaks as spaces): for table cells,
    list items, bold names and sentences."""
    return _SPECIAL.sub(_escape_one, str(value))


def md_code(value: Any) -> str:
    """`value` in a code span where a code span can hold it (no backtick, pipe or line break: inside a code span
    nothing can be escaped), else as escaped plain text."""
    text = str(value)
    if any(c in text for c in "`|\r\n\u2028\u2029") or not text.strip():
        return md(text)
    return f"`{text}`"


def md_url(path: Any) -> str:
    """A relative path as a link or image destination: percent-encoded, so spaces, brackets and parentheses in a
    name a run gave cannot end the link early."""
    return quote(str(path), safe="/._-")
