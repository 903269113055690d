"""The paper's own figures (vrh_lmms/assets/paper_figures.json) and which of them belong to a checkpoint.

A checkpoint is matched to a paper model by hub id, else by its folder name (a local snapshot named after its hub
repository, e.g. `.../Qwen2.5-VL-7B-Instruct`); nothing else is guessed: an unmatched model gets no paper column.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from vrh_lmms.base.paths import assets_path


@lru_cache(maxsize=1)
def paper_figures() -> dict[str, Any]:
    return json.loads((assets_path() / "paper_figures.json").read_text())


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9.]", "", text.lower())


def match_paper_model(pretrained: str | None) -> str | None:
    """The paper model a checkpoint is (hub id or snapshot folder named after the hub repository), or None."""
    if not pretrained:
        return None
    text = str(pretrained).rstrip("/")
    tail = _norm(Path(text).name)
    for name, row in paper_figures()["headline"].items():
        for hub in row["hub"]:
            if text == hub or tail == _norm(hub.split("/")[-1]):
                return name
    return None


def paper_row(name: str | None) -> dict[str, Any] | None:
    """Headline (base, random20, vrh20) and, where published, the k-curve of a paper model."""
    if name is None:
        return None
    figs = paper_figures()
    row = dict(figs["headline"][name])
    if name in figs["kcurve"]:
        row["kcurve"] = dict(zip(figs["kcurve"][name]["k"], figs["kcurve"][name]["vrh"]))
    return row
