"""`vrh_llama4`: lmms-eval's llama4_scout backend (simple) with head ablation, for Llama 4 checkpoints.

Corrections:
- Llama 4's image processor normalises pixels in bfloat16 (as Meta's original code does), which a float32 model
  (`dtype=float32`) cannot take; the pixels get the vision tower's dtype (model_wrappers/pixels.py). A bfloat16 model
  (the backend's default) runs exactly as without the wrapper;
- the backend pads batches on the tokenizer's side; the wrapper pads on the left, so batch size 2 answers as batch
  size 1 whatever the tokenizer says.
"""

from __future__ import annotations

from lmms_eval.models.simple.llama4_scout import Llama4Scout as _Simple

from vrh_lmms.model_wrappers.base import VRHMixin
from vrh_lmms.model_wrappers.pixels import pixels_follow_tower


class VRHLlama4(VRHMixin, _Simple):
    vrh_family = "llama4"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        pixels_follow_tower(self.model.vision_model)
        self.processor.tokenizer.padding_side = "left"
        self._tokenizer.padding_side = "left"
