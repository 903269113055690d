"""Grounding benchmarks: where their rows come from and how rows become docs, plus one process_docs per task.

Every grounding doc has: ``image``, ``expression``, ``gt_box`` ([x1, y1, x2, y2] original pixels), ``image_id``
(cluster for paired statistics), ``question_id``, ``image_width``, ``image_height``, ``vrh_key``.
RefSpatial docs carry ``mask`` and ``prompt`` instead of ``gt_box``.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vrh_lmms.base.boxes.geometry import xywh_to_xyxy
from vrh_lmms.base.synth.cache import SPLIT, SynthSpec, ensure_hub_data, ensure_refer_data
from vrh_lmms.tasks.common import docs as D
from vrh_lmms.tasks.common.refer import read_refer
from vrh_lmms.tasks.common.sources import Source, SourceError, load_rows, resolve, spec_row

log = logging.getLogger("vrh_lmms.tasks")
_COCO_ID = re.compile(r"COCO_[a-z]+\d*_(\d{6,12})")


@dataclass(frozen=True)
class Benchmark:
    key: str  # VRH_<key>_* environment variables
    default: Source
    local_kind: str | None
    allowed: tuple[str, ...]
    from_rows: Callable[..., Any]  # (rows in hub schema, split, origin, options) -> docs
    from_local: Callable[[Source, str], Any] | None = None  # refer/raw/synth layouts -> docs


# ------------------------------------------------------------------------------------------------ RefCOCO
def _image_id(row: dict[str, Any], fallback: str) -> str:
    if row.get("image_id") not in (None, ""):
        return str(row["image_id"])
    m = _COCO_ID.search(str(row.get("file_name") or ""))
    return str(int(m.group(1))) if m else fallback


def _readable_size(value, where: str) -> tuple[int, int]:
    """An image's (width, height) from its header; an unreadable image (corrupt, empty, beyond PIL's size limit) is
    one SourceError naming `where` (its doc and row), not a traceback from deep in the loader."""
    try:
        return D.image_size(value)
    except SourceError:
        raise
    except Exception as exc:  # PIL's UnidentifiedImageError, DecompressionBombError, OSError
        name = (value.get("path") if isinstance(value, dict) else value) or "its bytes"
        raise SourceError(f"{where}: image {name} is unreadable ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else 'no detail'})") from None


def refcoco_from_rows(rows, split: str, origin: str, options: dict | None = None):
    """lmms-lab RefCOCO rows (one per object, all its sentences in ``answer``, COCO xywh ``bbox``) -> docs."""
    D.require_columns(rows, ("image", "answer", "bbox"), origin)
    meta_cols = [c for c in ("answer", "bbox", "question_id", "file_name", "image_id") if c in rows.column_names]
    meta = rows.select_columns(meta_cols).to_list()
    images = D.encoded(rows.select_columns(["image"]))
    index, cols = [], {k: [] for k in ("expression", "gt_box", "image_id", "question_id", "image_width",
                                       "image_height")}
    for i, (row, image) in enumerate(zip(meta, images)):
        w, h = _readable_size(image["image"], f"{origin}: doc {len(index)} (row {i})")  # its first doc's id
        answers = row["answer"] if isinstance(row["answer"], list) else [row["answer"]]
        qid = str(row.get("question_id", i))
        for sentence in answers:
            if not str(sentence).strip():
                continue
            index.append(i)
            cols["expression"].append(str(sentence).strip())
            cols["gt_box"].append(xywh_to_xyxy(row["bbox"]))
            cols["image_id"].append(_image_id(row, qid))
            cols["question_id"].append(qid)
            cols["image_width"].append(int(w))
            cols["image_height"].append(int(h))
    if not index:
        raise SourceError(f"{origin}: split {split!r} has no referring expressions")
    return D.repeat_with(rows, index, cols)


def refer_loader(dataset: str) -> Callable[[Source, str], Any]:
    def load(source: Source, split: str):
        root = source.require("root", "the refer data root holding <dataset>/refs(<split_by>).p")
        return D.from_records(read_refer(root, source.get("dataset", dataset), split, source.get("split_by"),
                                         source.get("images"), source.origin))

    return load


_HUB_ANOMALY = {("refcoco", "val"), ("refcocog", "val")}


def _refcoco(dataset: str, key: str, hub: str) -> Benchmark:
    return Benchmark(key, Source("hub", {"path": hub}), "refer", ("hub", "files", "refer"), refcoco_from_rows,
                     refer_loader(dataset))


# ------------------------------------------------------------------------------------------------ Toloka
TOLOKA_IMAGES = "VRH_TOLOKA_IMAGES"
TOLOKA_COLUMNS = ("image", "width", "height", "left", "top", "right", "bottom", "question")
_TRUE = ("1", "true", "yes", "on")


def offline() -> bool:
    """HF_HUB_OFFLINE / HF_DATASETS_OFFLINE: no image URL can be fetched."""
    return any(os.environ.get(v, "").strip().lower() in _TRUE for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def toloka_image_folders(images: str | Path | None) -> list[Path]:
    """The image root and, if present, its COCO-2017 subfolders (Toloka's images are a COCO subset)."""
    if not images:
        return []
    root = Path(images).expanduser()
    return [root] + [root / sub for sub in ("train2017", "val2017") if (root / sub).is_dir()]


def toloka_records(rows: list[dict[str, Any]], images: str | Path | None, origin: str) -> list[dict[str, Any]]:
    """Toloka WSDM Cup rows (image URL, width, height, left, top, right, bottom, question) -> doc dicts.

    With an image root, every image is looked up there by the file name of its URL (``000000001066.jpg``); any
    missing image stops the load with one error naming the root and ``VRH_TOLOKA_IMAGES``. Without one, the
    URLs stay (fetched when a doc is read), which offline runs cannot do: they fail at once, naming the variable.
    """
    folders = toloka_image_folders(images)
    if images and not folders[0].is_dir():
        raise SourceError(f"{TOLOKA_IMAGES}={images}: not a folder")
    out, missing = [], []
    for i, row in enumerate(rows):
        lacking = [c for c in TOLOKA_COLUMNS if c not in row]
        if lacking:
            raise SourceError(f"{origin}: Toloka row {i} lacks {', '.join(lacking)}")
        image = str(row["image"])
        name = image.rsplit("/", 1)[-1]
        if folders:
            local = next((f / name for f in folders if (f / name).is_file()), None)
            if local is None:
                missing.append(name)
            image = str(local)
        elif not image.startswith(("http://", "https://")):
            if not Path(image).is_file():
                missing.append(name)
        elif offline():
            raise SourceError(f"{origin}: Toloka rows name image URLs ({image}) and the hub is offline; set "
                              f"{TOLOKA_IMAGES} to a folder holding the images by file name ({name}, ...)")
        out.append({"image": image, "expression": str(row["question"]).strip(),
                    "gt_box": [float(row[k]) for k in ("left", "top", "right", "bottom")],
                    "image_id": Path(name).stem, "question_id": str(i),
                    "image_width": int(row["width"]), "image_height": int(row["height"])})
    if missing:
        where = ", ".join(map(str, folders)) or "their paths"
        raise SourceError(f"{origin}: {len(missing)} of {len(rows)} Toloka images are not in {where} (first: "
                          f"{', '.join(missing[:3])}); set {TOLOKA_IMAGES} to the folder that holds them")
    return out


def toloka_from_rows(rows, split: str, origin: str, options: dict | None = None):
    images = (options or {}).get("images") or os.environ.get(TOLOKA_IMAGES, "").strip() or None
    return D.from_records(toloka_records(rows.to_list(), images, origin))


def toloka_local(source: Source, split: str):
    # deferred: keeps `vrh-lmms report` free of datasets
    import datasets

    root = Path(source.require("root", "a folder with <split>.csv")).expanduser()
    path = root / f"{split}.csv"
    if not path.is_file():
        raise SourceError(f"{source.origin}: {path} is missing")
    rows = datasets.load_dataset("csv", data_files={split: str(path)}, split=split)
    images = source.get("images") or (str(root / "images") if (root / "images").is_dir() else None)
    return D.from_records(toloka_records(rows.to_list(), images, source.origin))


# ------------------------------------------------------------------------------------------------ RefSpatial
REFSPATIAL_FOLDERS = {"location": "Location", "placement": "Placement", "unseen": "Unseen"}


def refspatial_from_rows(rows, split: str, origin: str, options: dict | None = None):
    D.require_columns(rows, ("image", "mask", "object"), origin)
    ids = rows["id"] if "id" in rows.column_names else list(range(len(rows)))
    out = rows.add_column("expression", [str(o).strip() for o in rows["object"]])
    out = out.add_column("image_id", [str(i) for i in ids])
    out = out.add_column("question_id", [str(i) for i in ids])
    if "prompt" not in out.column_names:
        out = out.add_column("prompt", out["expression"])
    return out


def refspatial_local(source: Source, split: str):
    """RoboRefer raw layout: ``<root>/<Split>/question.json`` with ``rgb_path``/``mask_path`` per question."""
    root = Path(source.require("root", "the RefSpatial-Bench folder")).expanduser()
    folder = root / REFSPATIAL_FOLDERS.get(split, split)
    qfile = folder / "question.json"
    if not qfile.is_file():
        raise SourceError(f"{source.origin}: {qfile} is missing")
    records = []
    for q in json.loads(qfile.read_text()):
        rec = {"image": str(folder / q["rgb_path"]), "mask": str(folder / q["mask_path"]),
               "object": q["object"], "prompt": q.get("prompt", q["object"]), "id": q.get("id", len(records)),
               "step": int(q.get("step", 0) or 0)}
        for key in ("image", "mask"):
            if not Path(rec[key]).exists():
                raise SourceError(f"{source.origin}: {rec[key]} (from {qfile}) is missing")
        records.append(rec)
    return refspatial_from_rows(D.from_records(records, ("image", "mask")), split, source.origin)


# ------------------------------------------------------------------------------------------------ synthetic
SYNTH_CONFIG_ENV = "VRH_SYNTH_CONFIG"


def synth_spec(options: dict[str, Any], origin: str):
    """SynthSpec from spec keys, else ``VRH_SYNTH_CONFIG`` (JSON text or a .json file), else defaults."""
    data = {k: v for k, v in options.items() if k in ("n", "seed", "start", "scene")}
    if not data and os.environ.get(SYNTH_CONFIG_ENV, "").strip():
        raw = os.environ[SYNTH_CONFIG_ENV].strip()
        origin = SYNTH_CONFIG_ENV
        try:
            data = json.loads(Path(raw).read_text() if not raw.lstrip().startswith("{") else raw)
        except (OSError, ValueError) as exc:
            raise SourceError(f"{SYNTH_CONFIG_ENV}: not JSON text or a readable JSON file ({exc})") from None
    try:
        return SynthSpec.from_dict(data, origin)
    except (TypeError, ValueError) as exc:
        raise SourceError(str(exc)) from None


def synth_local(source: Source, split: str):
    """Generate (once, cached) the synthetic hub-layout parquet and read it like RefCOCO."""
    folder = ensure_hub_data(synth_spec(dict(source.options), source.origin))
    rows = load_rows(Source("files", {"path": str(folder)}, source.origin), SPLIT)
    return refcoco_from_rows(rows, split, source.origin)


def synth_refer_local(source: Source, split: str):
    if source.kind == "synth":
        root = ensure_refer_data(synth_spec(dict(source.options), source.origin))
        split = SPLIT
    else:
        root = source.require("root", "a refer-layout root")
    return D.from_records(read_refer(root, source.get("dataset", "refcoco"), split, source.get("split_by", "unc"),
                                     source.get("images"), source.origin))


BENCHMARKS: dict[str, Benchmark] = {
    "refcoco": _refcoco("refcoco", "REFCOCO", "lmms-lab-encoder/RefCOCO"),
    "refcoco+": _refcoco("refcoco+", "REFCOCO_PLUS", "lmms-lab-encoder/RefCOCOplus"),
    "refcocog": _refcoco("refcocog", "REFCOCOG", "lmms-lab-encoder/RefCOCOg"),
    "toloka": Benchmark("TOLOKA", Source("hub", {"path": "toloka/WSDMCup2023"}), "raw", ("hub", "files", "raw"),
                        toloka_from_rows, toloka_local),
    "refspatial": Benchmark("REFSPATIAL", Source("hub", {"path": "BAAI/RefSpatial-Bench"}), "raw",
                            ("hub", "files", "raw"), refspatial_from_rows, refspatial_local),
    "synth": Benchmark("SYNTH", Source("synth", {}), None, ("synth", "files"), refcoco_from_rows, synth_local),
    "synth_refer": Benchmark("SYNTH_REFER", Source("synth", {}), "refer", ("synth", "refer"), refcoco_from_rows,
                             synth_refer_local),
}
# RefCOCO+ / RefCOCOg refer data usually sits under the same root as RefCOCO's.
ROOT_FALLBACK = {"REFCOCO_PLUS": "VRH_REFCOCO_ROOT", "REFCOCOG": "VRH_REFCOCO_ROOT"}


def load_docs(benchmark: str, split: str, task: str, dataset=None):
    """process_docs body: resolve the source (spec row / env / default), build docs, key them by task."""
    bench = BENCHMARKS[benchmark]
    spec = spec_row(dataset)
    if spec is None and dataset is not None:  # a derived YAML loaded real rows through lmms-eval
        docs = bench.from_rows(dataset, split, f"task {task}'s dataset_path")
        return D.with_keys(docs, task)
    source = resolve(bench.key, spec, bench.default, bench.local_kind, bench.allowed,
                     root_fallback=ROOT_FALLBACK.get(bench.key))
    if source.kind in ("hub", "files"):
        if (benchmark, split) in _HUB_ANOMALY and source.kind == "hub":
            log.warning("%s: the lmms-lab %s 'val' split merges the UNC/umd val with the Google val split "
                        "(docs/tasks.md); use the refer layout (VRH_%s_ROOT) for paper-comparable val numbers",
                        task, benchmark, bench.key)
        docs = bench.from_rows(load_rows(source, split), split, source.origin, dict(source.options))
    else:
        docs = bench.from_local(source, split)
    return D.with_keys(docs, task)


def loader(benchmark: str, split: str, task: str) -> Callable[[Any], Any]:
    """A ``process_docs`` function for one task (lmms-eval passes only the placeholder dataset)."""

    def process_docs(dataset):
        return load_docs(benchmark, split, task, dataset)

    process_docs.__name__ = process_docs.__qualname__ = task
    process_docs.__doc__ = f"Docs of {task}: {benchmark} split {split!r}."
    return process_docs


# One process_docs per task; YAMLs name them as `!function vrh_lmms.tasks.common.grounding_data.<task>`.
TASK_SPLITS = {
    "vrh_refcoco_val": ("refcoco", "val"), "vrh_refcoco_testA": ("refcoco", "testA"),
    "vrh_refcoco_testB": ("refcoco", "testB"),
    "vrh_refcoco_plus_val": ("refcoco+", "val"), "vrh_refcoco_plus_testA": ("refcoco+", "testA"),
    "vrh_refcoco_plus_testB": ("refcoco+", "testB"),
    "vrh_refcocog_val": ("refcocog", "val"), "vrh_refcocog_test": ("refcocog", "test"),
    "vrh_toloka": ("toloka", "test_public"), "vrh_toloka_private": ("toloka", "test_private"),
    "vrh_refspatial_location": ("refspatial", "location"), "vrh_refspatial_placement": ("refspatial", "placement"),
    "vrh_refspatial_unseen": ("refspatial", "unseen"),
    "vrh_synth_grounding": ("synth", "test"), "vrh_synth_grounding_refer": ("synth_refer", "test"),
}
globals().update({task: loader(bench, split, task) for task, (bench, split) in TASK_SPLITS.items()})
