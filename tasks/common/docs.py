"""Building lmms-eval doc datasets without decoding or re-encoding images.

Hub datasets hold encoded image bytes; exploding one row per referring expression with ``Dataset.from_list``
(as lmms-eval's REC tasks do) decodes and re-encodes every image. Here images stay encoded: rows are repeated by
index, flattened once at the Arrow level, and joined column-wise with the light per-doc columns.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from PIL import Image

from vrh_lmms.tasks.common.sources import SourceError


def require_columns(dataset, columns: Sequence[str], origin: str) -> None:
    missing = [c for c in columns if c not in dataset.column_names]
    if missing:
        raise SourceError(f"{origin}: rows lack column(s) {', '.join(missing)}; they have "
                          f"{', '.join(dataset.column_names)}")


def encoded(dataset, column: str = "image"):
    """The dataset with ``column`` cast to undecoded images (bytes/path dicts); strings are read as paths."""
    # deferred: keeps `vrh-lmms report` free of datasets
    import datasets

    return dataset.cast_column(column, datasets.Image(decode=False))


def image_size(value: Any) -> tuple[int, int]:
    """(width, height) from an undecoded image value, reading only the file header."""
    if isinstance(value, dict) and value.get("bytes"):
        with Image.open(io.BytesIO(value["bytes"])) as im:
            return im.size
    path = value.get("path") if isinstance(value, dict) else value
    if not path:
        raise SourceError("an image row has neither bytes nor a path")
    with Image.open(path) as im:
        return im.size


def repeat_with(dataset, rows: Sequence[int], columns: dict[str, list], image_columns: Sequence[str] = ("image",)):
    """Docs = ``dataset``'s image columns at ``rows`` (repeats allowed) joined with per-doc ``columns``."""
    # deferred: keeps `vrh-lmms report` free of datasets
    import datasets

    keep = [c for c in image_columns if c in dataset.column_names]
    images = encoded(dataset.select_columns(keep), keep[0]) if keep else None
    for c in keep[1:]:
        images = encoded(images, c)
    meta = datasets.Dataset.from_dict(columns)
    if images is None:
        return meta
    images = images.select(list(rows)).flatten_indices()
    out = datasets.concatenate_datasets([images, meta], axis=1)
    for c in keep:
        out = out.cast_column(c, datasets.Image())
    return out


def from_records(records: list[dict[str, Any]], image_columns: Sequence[str] = ("image",)):
    """Docs from Python dicts whose image columns hold paths/URLs (decoded lazily when a doc is read)."""
    # deferred: keeps `vrh-lmms report` free of datasets
    import datasets

    if not records:
        raise SourceError("no docs to evaluate")
    ds = datasets.Dataset.from_list(records)
    for c in image_columns:
        if c in ds.column_names:
            ds = ds.cast_column(c, datasets.Image())
    return ds


def with_keys(dataset, task: str):
    """Add ``vrh_key`` (task + doc index): how a doc's prompt convention is found again at scoring time."""
    return dataset.add_column("vrh_key", [f"{task}#{i}" for i in range(len(dataset))])
