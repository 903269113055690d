"""User-facing text never cites an internal issue number ("issue 33", "#33"): a user cannot look it up. Checked:
every page under docs/, the README, the committed reports and model cards, every `--help` text, the string
literals of the package (error messages, report text, docstrings) and the skip / xfail reasons of the tests."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from vrh_lmms import cli

ROOT = Path(__file__).resolve().parents[2]
CITATION = re.compile(r"\b[Ii]ssues? \d+|(?<![\w{}&/])#\d+\b|\bissue-\d+")


def _cited(text: str) -> list[str]:
    return [m.group(0) for m in CITATION.finditer(text)]


def _pages() -> list[Path]:
    pages = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "docs").rglob("*.py"),
             *(ROOT / "reports").rglob("*.md"), *(ROOT / "reports").rglob("*.html"),
             *(ROOT / "vrh_lmms").rglob("*.md"), *(ROOT / "benchmarks").rglob("*.md")]
    return [p for p in pages if p.is_file()]


def test_pages_cite_no_issue_numbers():
    found = {str(p.relative_to(ROOT)): _cited(p.read_text(encoding="utf-8")) for p in _pages()}
    assert len(found) > 20
    assert not {p: c for p, c in found.items() if c}


def test_help_cites_no_issue_numbers():
    parser = cli.build_parser()
    texts = [parser.format_help()] + [cli.subparser(parser, name).format_help() for name in cli.COMMANDS]
    assert not [c for t in texts for c in _cited(t)]


def _strings(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value


def _scan(folder: str, strings) -> dict[str, list[str]]:
    """Citations in the strings `strings(tree)` picks from each Python file under `folder`, by file."""
    found = {}
    for path in (ROOT / folder).rglob("*.py"):
        cited = [c for s in strings(ast.parse(path.read_text(encoding="utf-8"))) for c in _cited(s)]
        if cited:
            found[str(path.relative_to(ROOT))] = cited
    return found


def test_package_strings_cite_no_issue_numbers():
    assert not _scan("vrh_lmms", _strings)


def _reasons(tree: ast.AST):
    """`reason=` of skip / skipif / xfail marks and the message of pytest.skip / xfail calls."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        if not re.search(r"\b(skip|skipif|xfail|importorskip)$", name):
            continue
        args = [kw.value for kw in node.keywords if kw.arg in ("reason", "msg")]
        if name.endswith(("pytest.skip", "pytest.xfail")) and node.args:
            args.append(node.args[0])
        for arg in args:
            yield from _strings(arg)


def test_skip_and_xfail_reasons_cite_no_issue_numbers():
    assert not _scan("tests", _reasons)
