"""What the explorer (vrh_lmms.report.explorer) shows of a run's docs that its sample files do not hold: each doc's
image, downscaled, and every head's attention over the image of a few sample docs (the maps `attention-maps`
captures, kept per head instead of reduced to three views).

Written into a run folder's `doc_views/` by the pipelines that hold a model (the demo) and by `attention-maps`
(its chosen docs, vrh_lmms.runs.maps.outputs): `images/<task>_<doc id>.png`
(one thumbnail per evaluated doc, its longer side at most `max_side` pixels), `head_maps.json` (the sample docs:
expression, answer, boxes in original-image pixels, the cell grid) and `head_maps.npz` (one (layers, heads, rows, cols)
float16 array per sample doc, named `<task>_<doc id>`; read with numpy, no pickle). The report floor reads them.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from vrh_lmms.base import atomic
from vrh_lmms.base.owned import Layout, folder_of, is_file, json_with
from vrh_lmms.harness import lmms
from vrh_lmms.runs.maps.collect import DocMaps, collect_maps
from vrh_lmms.runs.maps.grid import cell_grid

FOLDER = "doc_views"
MAPS_JSON = "head_maps.json"
MAPS_NPZ = "head_maps.npz"
SCHEMA = "vrh-head-maps/1"
MAX_SIDE = 160  # thumbnails: the explorer draws boxes in original pixels over them, scaled

# what a run writes into its doc_views/ folder (vrh_lmms.base.owned)
LAYOUT: Layout = {"images": folder_of({"*.png": is_file, ".*.png.*": is_file}), MAPS_JSON: json_with("docs"),
                  MAPS_NPZ: is_file, f".{MAPS_JSON}.*": is_file, f".{MAPS_NPZ}.*": is_file}


def doc_key(task: str, doc_id: int | str) -> str:
    """`vrh_synth_grounding_7`: a doc's name in doc_views/ (image file stem, npz array name)."""
    return f"{task}_{doc_id}"


def thumbnail_png(image, max_side: int = MAX_SIDE) -> bytes:
    """A PIL image (or an (h, w, 3) uint8 array) as PNG bytes, its longer side at most `max_side` pixels."""
    img = Image.fromarray(image) if isinstance(image, np.ndarray) else image
    img = img.convert("RGB")
    scale = max_side / max(img.size)
    if scale < 1:
        img = img.resize((max(1, round(img.width * scale)), max(1, round(img.height * scale))), Image.LANCZOS)
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def write_doc_images(tm, tasks: Sequence[str], output: Path, limit: int | None = None,
                     max_side: int = MAX_SIDE) -> int:
    """One thumbnail per doc an evaluator pass with `limit` reads (lmms-eval's own docs, as the run saw them);
    returns how many were written. Docs without a PIL image are skipped."""
    folder = output / FOLDER / "images"
    folder.mkdir(parents=True, exist_ok=True)
    n = 0
    for task, doc_id, doc in lmms.eval_docs(tm, list(tasks), limit):
        image = doc.get("image") if isinstance(doc, dict) else None
        if not hasattr(image, "convert"):
            continue
        atomic.write_bytes(folder / f"{doc_key(task, doc_id)}.png", thumbnail_png(image, max_side))
        n += 1
    return n


def write_doc_thumbnails(docs: Sequence[DocMaps], output: Path, max_side: int = MAX_SIDE) -> int:
    """Thumbnails of the docs whose image was kept (collect_maps(keep_images=True)); returns how many."""
    folder = output / FOLDER / "images"
    kept = [d for d in docs if d.image is not None]
    for doc in kept:
        atomic.write_bytes(folder / f"{doc_key(doc.task, doc.doc_id)}.png", thumbnail_png(doc.image, max_side))
    return len(kept)


def maps_entry(doc: DocMaps) -> tuple[dict[str, Any], np.ndarray]:
    """A sample doc's head_maps.json entry and its (layers, heads, rows, cols) per-head grids over the main view."""
    grid = cell_grid(doc.cells, doc.views, doc.image_size)
    layers, heads = doc.per_head.shape[:2]
    grids = np.stack([grid.to_grid(doc.per_head[layer, head]) for layer in range(layers) for head in range(heads)])
    entry = {"task": doc.task, "doc_id": doc.doc_id, "image_id": doc.image_id, "expression": doc.expression,
             "answer": doc.answer, "rows": doc.rows, "gt_box": list(doc.gt_box),
             "pred_box": None if doc.pred_box is None else list(doc.pred_box), "correct": doc.correct,
             "grid": grid.to_dict(), "key": doc_key(doc.task, doc.doc_id)}
    return entry, grids.reshape(layers, heads, *grid.shape).astype(np.float16)


def write_head_maps(docs: Sequence[DocMaps], output: Path, header: dict[str, Any]) -> Path:
    """head_maps.npz, then head_maps.json (its presence means both are whole)."""
    folder = output / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    entries, arrays = [], {}
    for doc in (d for d in docs if d.per_head is not None):  # a caller may have dropped a doc's maps (locate)
        entry, grids = maps_entry(doc)
        entries.append(entry)
        arrays[entry["key"]] = grids
    with atomic.atomic_file(folder / MAPS_NPZ, suffix=".npz") as tmp:
        np.savez_compressed(tmp, **arrays)
    return atomic.write_json(folder / MAPS_JSON, {"schema": SCHEMA, **header, "docs": entries})


def capture_doc_views(lm, tm, task: str, sample_docs: Sequence[int], output: Path, limit: int | None,
                      header: dict[str, Any], gen_kwargs: str | None = None) -> Path:
    """Thumbnails of the first `limit` docs of `task` and every head's attention over `sample_docs` (the model's own
    answer teacher-forced, rows "answer", as `vrh-lmms attention-maps` reads them) into `output`/doc_views/.
    The model runs only on the sample docs (batch size 1; restored after)."""
    write_doc_images(tm, [task], output, limit)
    before = lm.batch_size_per_gpu
    lm.batch_size_per_gpu = 1
    try:
        maps = collect_maps(lm, [task], tm, sorted(sample_docs), None, "answer", gen_kwargs=gen_kwargs)
    finally:
        lm.batch_size_per_gpu = before
    return write_head_maps(maps, output, {**header, "task": task, "rows": "answer"})
