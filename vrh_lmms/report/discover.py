"""Find lmms-eval results files and their samples files under the folders given to `vrh-lmms report`.

Two layouts (docs/contracts.md): sweep folders `OUT/configs/<id>/results.json` + `samples_<task>.jsonl`, and plain
`lmms-eval --log_samples` output `<out>/<model>/<date>_results.json` + `<date>_samples_<task>.jsonl`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.paths import shown_path

_PLAIN_RESULTS = re.compile(r"^(?P<prefix>.+)_results\.json$")


@dataclass
class ResultsFile:
    """One results JSON with the samples files written next to it, keyed by task name."""

    results: Path
    samples: dict[str, Path]
    layout: str  # "sweep" or "lmms-eval"


@dataclass
class Discovery:
    files: list[ResultsFile] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _sweep_samples(folder: Path) -> dict[str, Path]:
    out = {}
    for path in sorted(folder.glob("samples_*.jsonl")):
        out[path.name[len("samples_") : -len(".jsonl")]] = path
    return out


def _plain_samples(folder: Path, prefix: str) -> dict[str, Path]:
    out = {}
    head = f"{prefix}_samples_"
    for path in sorted(folder.glob(f"{glob_escape(head)}*.jsonl")):
        out[path.name[len(head) : -len(".jsonl")]] = path
    return out


def glob_escape(text: str) -> str:
    """Escape glob metacharacters in a literal file-name prefix."""
    return re.sub(r"([\[\]*?])", r"[\1]", text)


def discover(dirs: list[str | Path]) -> Discovery:
    """Walk each folder (recursively, sorted) and collect results files; incomplete sweep configs become warnings."""
    found = Discovery()
    seen: set[Path] = set()
    for raw in dirs:
        root = Path(raw)
        if not root.is_dir():
            raise VRHError(f"{root}: not a folder (give sweep folders or lmms-eval --output_path folders)")
        before = len(found.files)
        for current, subdirs, names in os.walk(root):
            subdirs.sort()
            folder = Path(current)
            if folder.parent.name == "configs" and "results.json" not in names:
                found.warnings.append(f"{shown_path(folder)}: configuration has no results.json (incomplete run); "
                                      "skipped")
            for name in sorted(names):
                path = (folder / name).resolve()
                if path in seen:
                    continue
                if name == "results.json" and folder.parent.name == "configs":
                    seen.add(path)
                    found.files.append(ResultsFile(folder / name, _sweep_samples(folder), "sweep"))
                    continue
                match = _PLAIN_RESULTS.match(name)
                if match:
                    seen.add(path)
                    found.files.append(ResultsFile(folder / name, _plain_samples(folder, match["prefix"]), "lmms-eval"))
        if len(found.files) == before:
            raise VRHError(
                f"{root}: no lmms-eval results found (expected configs/<id>/results.json or <date>_results.json)"
            )
    for item in found.files:
        if not item.samples:
            found.warnings.append(
                f"{shown_path(item.results)}: no samples files beside it (run lmms-eval with --log_samples); skipped"
            )
    found.files = [item for item in found.files if item.samples]
    return found
