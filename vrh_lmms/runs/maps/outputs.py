"""`vrh-lmms attention-maps` outputs: one PNG per doc (all heads / top-k VRHs / all but the VRHs, GT, predicted
and located boxes), every head's map and the doc's thumbnail for the explorer (doc_views/), and attention_maps.json
with every grid, written atomically."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vrh_lmms.base import atomic
from vrh_lmms.base.heads.geometry import HeadRef
from vrh_lmms.base.owned import json_with
from vrh_lmms.runs.maps import doc_views
from vrh_lmms.runs.maps.collect import DocMaps
from vrh_lmms.runs.maps.grid import cell_grid
from vrh_lmms.runs.maps.locator import LocatorSettings, locate_box
from vrh_lmms.runs.maps.views import VIEW_TITLES, VIEWS, view_maps
from vrh_lmms.runs.runner import result_layout

RESULT = "attention_maps.json"
SCHEMA = "vrh-attention-maps/1"
# what `vrh-lmms attention-maps` writes into its folder (vrh_lmms.runs.runner.result_layout)
LAYOUT = result_layout(json_with("docs", schema_prefix="vrh-attention-maps/"), RESULT, "map_*.png",
                       doc_views.FOLDER)


def png_name(doc: DocMaps) -> str:
    return f"map_{doc.task}_{doc.doc_id}.png"


def doc_block(doc: DocMaps, top: Sequence[HeadRef], settings: LocatorSettings) -> tuple[dict[str, Any], dict]:
    """The doc's JSON entry and its (rows, cols) grids by view."""
    grid = cell_grid(doc.cells, doc.views, doc.image_size)
    grids = {name: grid.to_grid(values) for name, values in view_maps(doc.per_head, top).items()}
    located = locate_box(grids["top"], grid, settings)
    block = {"task": doc.task, "doc_id": doc.doc_id, "image_id": doc.image_id, "expression": doc.expression,
             "answer": doc.answer, "rows": doc.rows, "n_rows": doc.n_rows, "gt_box": list(doc.gt_box),
             "pred_box": None if doc.pred_box is None else list(doc.pred_box), "correct": doc.correct,
             "located_box": list(located), "grid": grid.to_dict(),
             "maps": {name: np.asarray(g).round(6).tolist() for name, g in grids.items()}}
    return block, grids


def write_maps(docs: Sequence[DocMaps], top: Sequence[HeadRef], settings: LocatorSettings, output: Path,
               header: dict[str, Any]) -> Path:
    """PNGs first, the JSON last (its presence means the run finished)."""
    # deferred: keeps `vrh-lmms attention-maps --help` free of matplotlib
    from vrh_lmms.runs.maps.figure import maps_figure

    output.mkdir(parents=True, exist_ok=True)
    k = len(top)
    entries = []
    for doc in docs:
        block, grids = doc_block(doc, top, settings)
        grid = cell_grid(doc.cells, doc.views, doc.image_size)
        panels = [(VIEW_TITLES[v].format(k=k), grids[v]) for v in VIEWS]
        title = f"{doc.task} doc {doc.doc_id}: \"{doc.expression}\" -> {doc.answer!r}"
        maps_figure(doc.image, grid, panels, doc.gt_box, doc.pred_box, output / png_name(doc), title=title,
                    located=block["located_box"])
        block["png"] = png_name(doc)
        entries.append(block)
    # every head's map of each doc and its thumbnail, for the explorer of a report these maps go into
    doc_views.write_doc_thumbnails(docs, output)
    doc_views.write_head_maps(docs, output, {"model": header.get("model"), "rows": header.get("rows")})
    data = {"schema": SCHEMA, **header, "k": k, "heads": [str(h) for h in top], "locator": settings.to_dict(),
            "views": {v: VIEW_TITLES[v].format(k=k) for v in VIEWS}, "docs": entries}
    path = output / RESULT
    atomic.write_json(path, data)
    return path
