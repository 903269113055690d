"""Tiling decisions of processors we cannot import, reproduced line by line from their published code.

- DeepSeek-VL2: `deepseek_vl2/models/processing_deepseek_vl_v2.py::select_best_resolution` (github
  deepseek-ai/DeepSeek-VL2 @ ef9f91e); candidates and image size are (width, height).
- Phi-4 multimodal: `Phi4MultimodalImageProcessor.dynamic_preprocess` (transformers 5.24, a port of the hub
  processor of microsoft/Phi-4-multimodal-instruct).
- InternVL remote code, as lmms-eval 0.7.3's backends tile: `lmms_eval/models/simple/internvl3.py`
  (`dynamic_preprocess`: candidates iterated in *set* order, so ties between equally close grids break by the
  set's iteration order; also internvl3_5) and `internvl2.py` (candidates in sorted order, like OpenGVLab's
  published `dynamic_preprocess`). Checked against the imported originals in tests.
"""

from __future__ import annotations

import math


def deepseek_vl2_best_resolution(image_size: tuple[int, int], candidates) -> tuple[int, int]:
    """(width, height) of the local canvas: most effective pixels, then least waste."""
    ow, oh = image_size
    best, max_eff, min_waste = None, 0, float("inf")
    for width, height in candidates:
        scale = min(width / ow, height / oh)
        dw, dh = int(ow * scale), int(oh * scale)
        eff = min(dw * dh, ow * oh)
        waste = width * height - eff
        if eff > max_eff or (eff == max_eff and waste < min_waste):
            max_eff, min_waste, best = eff, waste, (width, height)
    assert best is not None
    return int(best[0]), int(best[1])


def _closest_aspect_ratio(aspect: float, ratios, width: int, height: int, size: int) -> tuple[int, int]:
    best_diff, best = float("inf"), (1, 1)
    area = width * height
    for r in ratios:
        diff = abs(aspect - r[0] / r[1])
        if diff < best_diff:
            best_diff, best = diff, r
        elif diff == best_diff and area > 0.5 * size * size * r[0] * r[1]:
            best = r
    return best


def phi4_hd_canvas(w: int, h: int, crop: int, max_num: int = 36, min_num: int = 1,
                   ) -> tuple[tuple[int, int], tuple[int, int]]:
    """((canvas_w, canvas_h), (resized_w, resized_h)): the image is resized into the canvas, padded right/bottom."""
    wc, hc = math.ceil(w / crop), math.ceil(h / crop)
    if wc * hc > max_num:
        ratios = sorted({(i, j) for n in range(min_num, max_num + 1) for i in range(1, n + 1)
                         for j in range(1, n + 1) if min_num <= i * j <= max_num}, key=lambda x: x[0] * x[1])
        wc, hc = _closest_aspect_ratio(w / h, ratios, w, h, crop)
    tw, th = crop * wc, crop * hc
    if tw / w < th / h:
        new = (tw, int(h * (tw / w)))
    else:
        new = (int(w * (th / h)), th)
    return (tw, th), new


INTERNVL_TILINGS = ("sorted", "set")  # candidate order: InternVL's published code / lmms-eval's internvl3


def internvl_remote_grid(w: int, h: int, tile: int, min_num: int = 1, max_num: int = 12,
                         order: str = "sorted") -> tuple[int, int]:
    """(cols, rows) of InternVL's `dynamic_preprocess` (`find_closest_aspect_ratio`): the closest aspect ratio,
    ties going to a later candidate while the image covers more than half of its tiles."""
    if order not in INTERNVL_TILINGS:
        raise ValueError(f"unknown InternVL candidate order {order!r}; use one of {', '.join(INTERNVL_TILINGS)}")
    ratios = set((i, j) for n in range(min_num, max_num + 1) for i in range(1, n + 1) for j in range(1, n + 1)
                 if min_num <= i * j <= max_num)
    ordered = sorted(ratios, key=lambda x: x[0] * x[1])
    candidates = set(ordered) if order == "set" else ordered  # the set is rebuilt from the sorted list, as there
    return _closest_aspect_ratio(w / h, candidates, w, h, tile)
