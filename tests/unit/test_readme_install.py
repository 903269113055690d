"""The README's install paragraph says what the install pulls and how to keep torch CPU-only, and its Quick start no
longer calls an install that pulls the CUDA stack "CPU only"."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def _quick_start() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("## Quick start")
    return text[start:text.index("\n## ", start + 1)]


def test_quick_start_says_what_the_install_pulls_and_how_to_get_a_cpu_torch():
    section = _quick_start()
    heading = section.splitlines()[0]
    assert "CPU only" not in heading
    assert re.search(r"\d+(\.\d+)? GB in `\.venv`", section)  # the measured size
    for part in ("CUDA", "torch", "triton"):
        assert part in section
    cpu = section.index("pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu")
    assert cpu < section.index('pip install -e ".[test]"', cpu)  # the CPU wheel first, then the package
