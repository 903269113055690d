"""Attention capture (exact rows, memory-light) and image-token layouts for head discovery."""

from vrh_lmms.model.capture.attention import CaptureHandle, CapturePlan, CaptureResult, capture_attention
from vrh_lmms.model.capture.extras import layout_extras
from vrh_lmms.model.capture.layouts import ImageTokenMap, box_key_mask, box_token_indices, image_token_map, lm_input_ids

__all__ = ["CaptureHandle", "CapturePlan", "CaptureResult", "ImageTokenMap", "box_key_mask", "box_token_indices",
           "capture_attention", "image_token_map", "layout_extras", "lm_input_ids"]
