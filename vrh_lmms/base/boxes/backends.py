"""The resize a running lmms-eval backend really applies, read from the backend object itself (no user setting).

Qwen2.5-VL answers in pixels of the image it was given, and lmms-eval's two ``qwen2_5_vl`` paths give it different
images: the chat path (``qwen2_5_vl``, ``vrh_qwen25``) sends images without pixel limits, so
``qwen_vl_utils.fetch_image`` resizes with its own defaults before the processor; the simple path
(``--force_simple``, ``vrh_qwen25 --force_simple``) writes the backend's ``min_pixels``/``max_pixels`` into every
image item, so ``fetch_image`` already resizes with those. ``backend_box_params`` turns a backend object into the
``qwen2_5_vl`` convention's parameters; ``calling_backend`` finds that object from inside a task function the
backend calls (``doc_to_visual`` runs inside ``generate_until`` on both paths).

Duck-typed on purpose: nothing here imports lmms-eval.
"""

from __future__ import annotations

import sys
from typing import Any

# lmms-eval 0.7.3: the simple class; the chat class (lmms_eval.models.chat.qwen2_5_vl) subclasses it.
_QWEN25_BACKEND = ("lmms_eval.models.simple.qwen2_5_vl", "Qwen2_5_VL")


def _is_qwen25_backend(backend: Any) -> bool:
    return any((c.__module__, c.__name__) == _QWEN25_BACKEND for c in type(backend).__mro__)


def _processor_limits(backend: Any) -> tuple[int | None, int | None, int | None]:
    """(min_pixels, max_pixels, factor) the HF image processor resizes with (transformers 5: ``size``)."""
    ip = getattr(getattr(backend, "processor", None), "image_processor", None)
    size = getattr(ip, "size", None)

    def get(key: str) -> Any:
        return size.get(key) if isinstance(size, dict) else getattr(size, key, None)

    lo, hi = (get("shortest_edge"), get("longest_edge")) if size is not None else (None, None)
    patch, merge = getattr(ip, "patch_size", None), getattr(ip, "merge_size", None)
    factor = int(patch) * int(merge) if patch and merge else None
    return (int(lo) if lo else None), (int(hi) if hi else None), factor


def backend_box_params(backend: Any) -> tuple[str, dict[str, Any]] | None:
    """(convention name, parameters) of the resize ``backend`` applies, or None when it is not one we know.

    lmms-eval's Qwen2.5-VL backend: the processor's limits (loaded with the backend's ``min_pixels`` /
    ``max_pixels``), and for the qwen_vl_utils step the same limits on the simple path, its defaults (None) on
    the chat path (``is_simple = False``).
    """
    if backend is None or not _is_qwen25_backend(backend):
        return None
    own_lo, own_hi = getattr(backend, "min_pixels", None), getattr(backend, "max_pixels", None)
    lo, hi, factor = _processor_limits(backend)
    simple = bool(getattr(backend, "is_simple", True))
    params: dict[str, Any] = {
        "min_pixels": lo if lo is not None else own_lo,
        "max_pixels": hi if hi is not None else own_hi,
        "fetch": True,
        "fetch_min_pixels": own_lo if simple else None,
        "fetch_max_pixels": own_hi if simple else None,
    }
    if factor:
        params["factor"] = factor
    return "qwen2_5_vl", params


def _is_backend(obj: Any) -> bool:
    return callable(getattr(obj, "generate_until", None)) and isinstance(getattr(obj, "task_dict", None), dict)


def calling_backend(max_depth: int = 40) -> Any | None:
    """The lmms-eval model object whose method is on the call stack (e.g. ``generate_until`` calling our
    ``doc_to_visual``), or None."""
    frame = sys._getframe(1)
    for _ in range(max_depth):
        if frame is None:
            return None
        obj = frame.f_locals.get("self")
        if obj is not None and _is_backend(obj):
            return obj
        frame = frame.f_back
    return None
