"""`vrh_gemma4`: lmms-eval's gemma4 backend (simple) with head ablation, for Gemma 4 checkpoints.

Corrections:
- the backend casts every input to bfloat16 (`inputs.to(device, dtype=torch.bfloat16)`) whatever dtype the model has,
  which a float32 model (`dtype=float32`) cannot take; the pixels get the vision tower's dtype
  (model_wrappers/pixels.py). A bfloat16 model (the backend's default) runs exactly as without the wrapper.

Unlike lmms-eval's gemma3, this backend loads its processor with `padding_side="left"`, so its padding to a multiple
of 8 needs no correction whatever the tokenizer says (tested).
"""

from __future__ import annotations

from lmms_eval.models.simple.gemma4 import Gemma4 as _Simple

from vrh_lmms.model_wrappers.base import VRHMixin
from vrh_lmms.model_wrappers.pixels import pixels_follow_tower


class VRHGemma4(VRHMixin, _Simple):
    vrh_family = "gemma4"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        pixels_follow_tower(self.model.model.vision_tower)
