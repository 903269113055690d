"""Coordinate spaces models answer in, and their mapping back to original-image pixels.

Each space maps one raw ``[x1, y1, x2, y2]`` (or point) read from the output to pixels of the original image of
size ``(width, height)``. Parameters come from the active convention (e.g. Qwen2.5-VL's resize limits).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vrh_lmms.base.boxes.resize import qwen2_5_vl_model_size

# fn(values, axis_is_x flags, width, height, params) -> pixel values
Scaler = Callable[[Sequence[float], Sequence[bool], float, float, Mapping[str, Any]], list[float]]


def _linear(scale_x: float, scale_y: float, off_x: float = 0.0, off_y: float = 0.0):
    def apply(values: Sequence[float], is_x: Sequence[bool]) -> list[float]:
        return [v * scale_x + off_x if x else v * scale_y + off_y for v, x in zip(values, is_x)]

    return apply


_RESIZE_KEYS = ("min_pixels", "max_pixels", "fetch_min_pixels", "fetch_max_pixels", "factor", "fetch")


def resized_size(width: float, height: float, params: Mapping[str, Any]) -> tuple[int, int]:
    """(width, height) of the image Qwen2.5-VL is assumed to see under the convention's parameters."""
    return qwen2_5_vl_model_size(int(width), int(height),
                                 **{k: params[k] for k in _RESIZE_KEYS if params.get(k) is not None})


def resized_pixels(values, is_x, width, height, params) -> list[float]:
    """Qwen2.5-VL: absolute pixels of the image after smart_resize."""
    rw, rh = resized_size(width, height, params)
    return _linear(width / rw, height / rh)(values, is_x)


def normalized(denominator: float) -> Scaler:
    """Values on a 0..denominator grid relative to the original image (InternVL, Qwen3-VL, GLM: 1000)."""

    def scale(values, is_x, width, height, params) -> list[float]:
        return _linear(width / denominator, height / denominator)(values, is_x)

    scale.__doc__ = f"0-{denominator:g} relative coordinates"
    return scale


def unit(values, is_x, width, height, params) -> list[float]:
    """Fractions of the image; ``pad_to_square`` reads them on the centred square LLaVA-1.5 pads to."""
    if params.get("pad_to_square"):
        side = float(max(width, height))
        return _linear(side, side, -(side - width) / 2, -(side - height) / 2)(values, is_x)
    return _linear(width, height)(values, is_x)


def auto(values, is_x, width, height, params) -> list[float]:
    """Undocumented formats: all values <= 1 are fractions, anything larger is on a 0-1000 grid."""
    if all(abs(v) <= 1.0 for v in values):
        return unit(values, is_x, width, height, params)
    return normalized(1000.0)(values, is_x, width, height, params)


def absolute(values, is_x, width, height, params) -> list[float]:
    """Already original-image pixels."""
    return [float(v) for v in values]


SPACES: dict[str, Scaler] = {
    "resized_pixels": resized_pixels,
    "norm1000": normalized(1000.0),
    "norm999": normalized(999.0),
    # PaliGemma <locNNNN>: bins 0..1023; big_vision's evaluators decode value / 1023 (segmentation.py
    # `tokens[:, :4] / 1023`), so bin 1023 is the far image edge.
    "loc1023": normalized(1023.0),
    "unit": unit,
    "auto": auto,
    "pixels": absolute,
}
