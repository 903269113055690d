"""`vrh_gemma4`: lmms-eval's gemma4 backend (simple) with head ablation, for Gemma 4 checkpoints.

No correction is needed (tested): unlike lmms-eval's gemma3, this backend loads its processor with
`padding_side="left"`, so its padding to a multiple of 8 stays on the left whatever the tokenizer says; its cast of
every input to bfloat16 reaches a float32 model (`dtype=float32`) as pixels the patch embedder casts back itself.
The soft-token budget is the backend's `max_soft_tokens` model arg (280 by default), which discovery's image-token
layout reads from the backend (vrh_lmms.model.capture.extras).
"""

from __future__ import annotations

from lmms_eval.models.simple.gemma4 import Gemma4 as _Simple

from vrh_lmms.model_wrappers.base import VRHMixin


class VRHGemma4(VRHMixin, _Simple):
    vrh_family = "gemma4"
