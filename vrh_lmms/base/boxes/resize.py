"""Qwen2-VL/2.5-VL image resizing, reproduced without importing transformers or qwen_vl_utils.

Qwen2.5-VL answers in pixels of the image it was *given*, which is the original image after two resizes in
lmms-eval's ``qwen2_5_vl`` backend: ``qwen_vl_utils.fetch_image`` (``smart_resize`` with the message's
``min_pixels``/``max_pixels``, else its own defaults) and then the HF image processor (``smart_resize`` with the
processor's ``min_pixels``/``max_pixels``). The two ``smart_resize`` copies differ in where they clamp to one
``factor``; both are reproduced exactly and checked against the originals in tests.
"""

from __future__ import annotations

import math

# qwen_vl_utils 0.0.14: IMAGE_MIN_TOKEN_NUM = 4, IMAGE_MAX_TOKEN_NUM = 16384 tokens of factor x factor pixels.
QWEN_VL_UTILS_MIN_TOKENS = 4
QWEN_VL_UTILS_MAX_TOKENS = 16384
MAX_RATIO = 200
# lmms-eval 0.7.3 qwen2_5_vl backend defaults (passed to AutoProcessor.from_pretrained).
LMMS_EVAL_MIN_PIXELS = 256 * 28 * 28
LMMS_EVAL_MAX_PIXELS = 1605632


def _check_ratio(height: int, width: int) -> None:
    if min(height, width) <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    if max(height, width) / min(height, width) > MAX_RATIO:
        raise ValueError(f"absolute aspect ratio must be smaller than {MAX_RATIO}, got {width}x{height}")


def smart_resize_qwen_vl_utils(height: int, width: int, factor: int, min_pixels: int | None = None,
                               max_pixels: int | None = None) -> tuple[int, int]:
    """``qwen_vl_utils.smart_resize`` (0.0.14): returns (height, width)."""
    max_pixels = max_pixels if max_pixels is not None else QWEN_VL_UTILS_MAX_TOKENS * factor**2
    min_pixels = min_pixels if min_pixels is not None else QWEN_VL_UTILS_MIN_TOKENS * factor**2
    if max_pixels < min_pixels:
        raise ValueError(f"max_pixels ({max_pixels}) must be >= min_pixels ({min_pixels})")
    _check_ratio(height, width)
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = math.floor(height / beta / factor) * factor
        w_bar = math.floor(width / beta / factor) * factor
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def smart_resize_transformers(height: int, width: int, factor: int = 28, min_pixels: int = 56 * 56,
                              max_pixels: int = 14 * 14 * 4 * 1280) -> tuple[int, int]:
    """``transformers.models.qwen2_vl.image_processing_qwen2_vl.smart_resize`` (5.24): returns (height, width)."""
    _check_ratio(height, width)
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def qwen2_5_vl_model_size(width: int, height: int, *, min_pixels: int = LMMS_EVAL_MIN_PIXELS,
                          max_pixels: int = LMMS_EVAL_MAX_PIXELS, fetch_min_pixels: int | None = None,
                          fetch_max_pixels: int | None = None, factor: int = 28,
                          fetch: bool = True) -> tuple[int, int]:
    """(width, height) of the image Qwen2.5-VL sees, for an original ``width`` x ``height`` image.

    ``min_pixels``/``max_pixels`` are the processor's; ``fetch_*`` are what the chat message carried to
    ``qwen_vl_utils`` (None = its defaults, as lmms-eval's chat backend sends none; its simple backend sends the
    processor's values). ``fetch=False`` skips the qwen_vl_utils step (plain processor use).
    """
    h, w = int(height), int(width)
    if fetch:
        h, w = smart_resize_qwen_vl_utils(h, w, factor, fetch_min_pixels, fetch_max_pixels)
    h, w = smart_resize_transformers(h, w, factor, min_pixels, max_pixels)
    return w, h
