"""`vrh_gemma3`: lmms-eval's gemma3 backend (simple) with head ablation, for Gemma 3 checkpoints.

Correction: the backend casts every input to bfloat16 (`inputs.to(device, dtype=torch.bfloat16)`) whatever dtype the
model has, which a float32 model (`dtype=float32`) cannot take; a pre-hook on the vision tower gives the pixels the
tower's dtype. A bfloat16 model (the backend's default) runs exactly as without the wrapper.
"""

from __future__ import annotations

from lmms_eval.models.simple.gemma3 import Gemma3 as _Simple
from vrh_lmms.model_wrappers.base import VRHMixin


def _pixels_in_tower_dtype(tower, args, kwargs):
    dtype = next(tower.parameters()).dtype
    pixels = kwargs.get("pixel_values")
    if pixels is not None and pixels.dtype != dtype:
        kwargs["pixel_values"] = pixels.to(dtype)
    return args, kwargs


class VRHGemma3(VRHMixin, _Simple):
    vrh_family = "gemma3"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.model.model.vision_tower.register_forward_pre_hook(_pixels_in_tower_dtype, with_kwargs=True)
