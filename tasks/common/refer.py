"""Read the refer-toolkit layout (``refs(<split_by>).p`` + COCO ``instances.json``) into grounding docs.

Layout (lichengunc/refer): ``<root>/<dataset>/refs(<split_by>).p`` (a pickled list of refs) and
``<root>/<dataset>/instances.json``; images are COCO train2014 files. Annotations are read with pycocotools.
One doc per referring sentence, as REC evaluation counts them.
"""

from __future__ import annotations

import contextlib
import io
import pickle
from pathlib import Path
from typing import Any

from pycocotools.coco import COCO

from vrh_lmms.base.boxes.geometry import xywh_to_xyxy
from vrh_lmms.base.errors import VRHError
from vrh_lmms.tasks.common.sources import SourceError, resolve_image_path

DEFAULT_SPLIT_BY = {"refcoco": "unc", "refcoco+": "unc", "refcocog": "umd"}
IMAGE_DIRS = ("images/mscoco/images/train2014", "images/train2014", "images", "train2014")


def find_data_dir(root: Path, dataset: str, split_by: str, origin: str) -> Path:
    for cand in (root / dataset, root):
        if (cand / f"refs({split_by}).p").is_file():
            return cand
    found = sorted(str(p.relative_to(root)) for p in root.glob("**/refs(*).p"))
    raise SourceError(f"{origin}: no {dataset}/refs({split_by}).p under {root}"
                      + (f"; found {', '.join(found)}" if found else ""))


class RefsRefused(SourceError, VRHError):
    """A refs file that is not plain data: shown as one line wherever sources' errors or VRHError are."""


class _PlainUnpickler(pickle.Unpickler):
    """Unpickles only what pickle builds without importing anything: dicts, lists, tuples, strings, numbers. The
    REFER refs files hold nothing else, and any other object in a pickle can run code while it is loaded."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"it asks for {module}.{name}, and refs files hold only plain data")


def load_refs(path: Path, origin: str = "refer source") -> Any:
    """The refs of a REFER ``refs(<split_by>).p`` (a Python-2-era pickle), read without running any code in it."""
    try:
        with open(path, "rb") as f:
            return _PlainUnpickler(f).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as exc:
        raise RefsRefused(f"{origin}: {path} is not a REFER refs file of plain data, refused ({exc})") from None


def image_dirs(root: Path, data_dir: Path, images: str | None) -> list[Path]:
    dirs = [Path(images).expanduser()] if images else []
    dirs += [root / d for d in IMAGE_DIRS] + [data_dir / "images", data_dir.parent / "images"]
    return [d for d in dirs if d.is_dir()]


def load_coco(path: Path, origin: str):
    if not path.is_file():
        raise SourceError(f"{origin}: {path} is missing (the refer layout keeps instances.json beside refs(*).p)")
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress to stdout
        return COCO(str(path))


def read_refer(root: str | Path, dataset: str, split: str, split_by: str | None = None, images: str | None = None,
               origin: str = "refer source") -> list[dict[str, Any]]:
    """Grounding docs (image path, expression, gt_box xyxy px, ids, image size) for refs of ``split``."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise SourceError(f"{origin}: {root} is not a folder")
    split_by = split_by or DEFAULT_SPLIT_BY.get(dataset, "unc")
    data_dir = find_data_dir(root, dataset, split_by, origin)
    refs_path = data_dir / f"refs({split_by}).p"
    refs = load_refs(refs_path, origin)
    coco = load_coco(data_dir / "instances.json", origin)
    chosen = [r for r in refs if r.get("split") == split]
    if not chosen:
        splits = sorted({str(r.get("split")) for r in refs})
        raise SourceError(f"{origin}: {refs_path} has no refs in split {split!r}; splits: {', '.join(splits)}")
    folders = image_dirs(root, data_dir, images)
    docs: list[dict[str, Any]] = []
    for ref in chosen:
        try:
            ann = coco.anns[ref["ann_id"]]
            img = coco.imgs[ref["image_id"]]
        except KeyError as exc:
            raise SourceError(f"{origin}: ref {ref.get('ref_id')} points at {exc} missing from instances.json")
        path = resolve_image_path(img["file_name"], folders)
        if path is None:
            raise SourceError(f"{origin}: image {img['file_name']} not found in "
                              f"{', '.join(map(str, folders)) or 'any image folder'}; set the images folder "
                              f"(VRH_<KEY>_IMAGES or the spec's 'images')")
        for sent in ref.get("sentences", []):
            docs.append({
                "image": str(path),
                "expression": str(sent.get("sent") or sent.get("raw") or "").strip(),
                "gt_box": xywh_to_xyxy(ann["bbox"]),
                "image_id": str(ref["image_id"]),
                "question_id": str(ref.get("ref_id", ref["ann_id"])),
                "image_width": int(img["width"]),
                "image_height": int(img["height"]),
            })
    return docs
