"""What the real haystack tasks (MM-NIAH, Visual Haystacks) share: a local snapshot folder from an environment
variable, image files checked once at load time (a missing folder or file is one VRHError line naming it and the
variable), and docs that carry their images as paths in prompt order, opened only when lmms-eval asks for them.

A doc's images are `vrh_images` (paths, the order doc_to_visual returns them and the prompt numbers them),
`vrh_image_sizes` ([w, h] each, read from the file headers), and `vrh_evidence` where the record tells where the
needle is (docs/evidence.md, "Real haystack datasets"); the rendered prompt is `vrh_prompt`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import datasets
from PIL import Image

from vrh_lmms.base.errors import VRHError


def env_folder(var: str, what: str) -> Path:
    """The folder named by `var`; unset or not a folder is one line naming the variable and what belongs there."""
    raw = os.environ.get(var, "").strip()
    if not raw:
        raise VRHError(f"{var} is not set: point it at {what}")
    path = Path(raw).expanduser()
    if not path.is_dir():
        raise VRHError(f"{var}={raw}: no such folder ({what})")
    return path


def media_folder(path: Path, var: str, what: str) -> Path:
    if not path.is_dir():
        raise VRHError(f"missing media folder {path} ({what}; set by {var})")
    return path


class ImageFolder:
    """The media folder of one load: checks each image once and reads each size once (haystacks share images:
    Visual Haystacks draws its up to 10,000 distractors per question from COCO's 5,000 val2017 images)."""

    def __init__(self, folder: Path, var: str):
        self.folder, self.var = folder, var
        self._sizes: dict[str, list[int]] = {}

    def paths(self, names: Iterable[str], where: str) -> list[str]:
        """Paths of `names` (relative to the folder, as the records give them); the first missing one is one error
        line naming the file, the folder and the variable that chose it."""
        out = []
        for name in names:
            p = str(self.folder / str(name))
            if p not in self._sizes:
                if not Path(p).is_file():
                    raise VRHError(f"{where}: missing image file {name} in the media folder {self.folder} (set by "
                                   f"{self.var})")
                self._sizes[p] = _header_size(p)
            out.append(p)
        return out

    def sizes(self, paths: Iterable[str]) -> list[list[int]]:
        """[w, h] of each of `paths` (as `paths` returned them), from the file headers."""
        return [self._sizes[p] for p in paths]


def _header_size(path: str) -> list[int]:
    with Image.open(path) as im:
        return [int(im.size[0]), int(im.size[1])]


def read_limit(var: str) -> int | None:
    raw = os.environ.get(var, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise VRHError(f"{var}={raw!r}: give a positive whole number")
    return int(raw)


def doc_to_visual(doc: Mapping[str, Any]) -> list:
    """The doc's images, opened in prompt order (RGB)."""
    out = []
    for p in doc["vrh_images"]:
        with Image.open(p) as im:
            out.append(im.convert("RGB"))
    return out


def doc_to_text(doc: Mapping[str, Any], lmms_eval_specific_kwargs: Mapping[str, Any] | None = None) -> str:
    kwargs = lmms_eval_specific_kwargs or {}
    return f"{kwargs.get('pre_prompt', '')}{doc['vrh_prompt']}{kwargs.get('post_prompt', '')}"


def to_dataset(rows: list[dict[str, Any]], task: str):
    """The docs as a datasets.Dataset with `vrh_key`; `vrh_evidence` rows without evidence hold None."""
    if not rows:
        raise VRHError(f"{task}: no docs to evaluate")
    return datasets.Dataset.from_list([{**r, "vrh_key": f"{task}#{i}"} for i, r in enumerate(rows)])
