"""Every doc a run will evaluate, read and checked before its output folder is claimed and its model loaded.

`check_run_docs(tm, tasks, limit, only)` loads each task's docs through lmms-eval (as the run will) and reads every doc
the run evaluates as the model will see it: each image the task hands the model (`doc_to_visual`) opened and fully
decoded with truncated files refused (lmms-eval's import lets PIL fill them in silently), of a sane size (at most
`MAX_IMAGE_PIXELS`), its ground-truth box well formed and inside the image, its referring expression not blank. The
first bad doc is one VRHError line naming the task, the doc id and what is wrong; a task whose data do not load at all
is one line naming the task and the cause. Called by the preflights of sweep, discovery and the one-result commands.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from PIL import Image, ImageFile

from vrh_lmms.base.boxes.geometry import checked_box
from vrh_lmms.base.errors import VRHError
from vrh_lmms.harness import lmms

# PIL's own decompression-bomb limit (it warns beyond it and refuses twice that): larger than any benchmark image
# (an 8K scan is 33 Mpx) and far smaller than what would exhaust memory once decoded (30000 x 30000 RGB is 2.7 GB).
MAX_IMAGE_PIXELS = 89_478_485


@contextmanager
def truncated_images_refused() -> Iterator[None]:
    """PIL raises on a truncated image file while the docs are checked, whatever the process-wide flag says."""
    before = ImageFile.LOAD_TRUNCATED_IMAGES
    ImageFile.LOAD_TRUNCATED_IMAGES = False
    try:
        yield
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = before


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def image_problem(image: Image.Image) -> str | None:
    """What is wrong with one image the model would get (None: nothing): its size, then a full decode."""
    width, height = image.size
    if width <= 0 or height <= 0:
        return f"is {width} x {height} pixels (empty)"
    if width * height > MAX_IMAGE_PIXELS:
        return f"is {width} x {height} pixels, beyond the {MAX_IMAGE_PIXELS:,} an image may hold"
    try:
        image.load()
    except Exception as exc:  # truncated or corrupt data: OSError, SyntaxError, zlib.error, ...
        return f"does not decode ({_one_line(exc)})"
    return None


def visuals(task, doc: Mapping[str, Any]) -> list[Image.Image]:
    """The images `task` hands the model for `doc` (lmms-eval's `doc_to_visual`; video and audio are not images)."""
    to_visual = getattr(task, "doc_to_visual", None)
    if not callable(to_visual):
        return []
    items = to_visual(doc) or []
    return [v for v in (items if isinstance(items, list | tuple) else [items]) if isinstance(v, Image.Image)]


def doc_problem(task, doc: Mapping[str, Any], where: str) -> str | None:
    """What is wrong with one doc (None: nothing); a bad box raises its own VRHError line naming `where`."""
    try:
        images = visuals(task, doc)
    except VRHError:  # the task's own line (it names the file)
        raise
    except Exception as exc:  # a corrupt, empty or unreadable image file, a missing path
        return f"its media do not open ({_one_line(exc)})"
    for i, image in enumerate(images):
        problem = image_problem(image)
        if problem is not None:
            return f"image {i + 1} of {len(images)} {problem}" if len(images) > 1 else f"its image {problem}"
    if "expression" in doc and not (isinstance(doc["expression"], str) and doc["expression"].strip()):
        return f"field 'expression' is {doc['expression']!r}: a referring expression must not be blank"
    if doc.get("gt_box") is not None:
        size = (doc.get("image_width"), doc.get("image_height"))
        if not all(isinstance(v, int | float) and v > 0 for v in size):
            size = images[0].size if len(images) == 1 else None
        if size is None:
            return "cannot tell the image size its 'gt_box' is in (no image_width/image_height, not one image)"
        checked_box(doc["gt_box"], (int(size[0]), int(size[1])), f"{where}: field 'gt_box'")
    return None


def _task_docs(tm, task: str):
    """(name, task object) of every task `task` names, its docs loaded; a load failure is one line naming `task`."""
    try:
        yield from lmms.leaf_tasks(tm, task)
    except VRHError as exc:
        raise VRHError(f"{task}: {exc}") from None
    except Exception as exc:
        raise VRHError(f"{task}: its docs did not load ({_one_line(exc)})") from None


def check_run_docs(tm, tasks: list[str], limit: int | float | None = None, only: set[int] | None = None,
                   offsets: Mapping[str, int] | None = None) -> None:
    """Read and check every doc a run evaluates: of each task, the `limit` docs (lmms-eval's rule, as
    `lmms.eval_docs`) after its first `offsets[task]` (discovery's, left out), or the doc ids `only`. Raises one
    VRHError line naming the task and doc id; returns None."""
    with truncated_images_refused():
        for task in tasks:
            for name, leaf in _task_docs(tm, task):
                docs = leaf.eval_docs
                first = int((offsets or {}).get(name, (offsets or {}).get(task, 0)))
                n = min(len(docs), first + lmms.limited(len(docs), limit))
                for doc_id in sorted(i for i in only if first <= i < n) if only is not None else range(first, n):
                    where = f"{name} doc {doc_id}"
                    try:
                        doc = docs[doc_id]
                    except Exception as exc:  # the dataset decodes the doc's image as it is read
                        raise VRHError(f"{where}: does not read ({_one_line(exc)})") from None
                    problem = doc_problem(leaf, doc, where)
                    if problem is not None:
                        raise VRHError(f"{where}: {problem}")
