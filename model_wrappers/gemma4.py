"""`vrh_gemma4`: lmms-eval's gemma4 backend (simple) with head ablation, for Gemma 4 checkpoints (`gemma4`, and the
encoder-free 12B's `gemma4_unified`, which the backend's Auto classes load alike).

No correction is needed (tested): unlike lmms-eval's gemma3, this backend loads its processor with
`padding_side="left"`, so its padding to a multiple of 8 stays on the left whatever the tokenizer says; its cast of
every input to bfloat16 reaches a float32 model (`dtype=float32`) as pixels the patch embedder casts back itself.
The soft-token budget is the backend's `max_soft_tokens` model arg (280 by default), which discovery's image-token
layout reads from the backend (vrh_lmms.model.capture.extras); a budget the processor does not offer is refused in
one line before anything loads (the backend would raise a bare ValueError).
"""

from __future__ import annotations

from lmms_eval.models.simple.gemma4 import ALLOWED_MAX_SOFT_TOKENS
from lmms_eval.models.simple.gemma4 import Gemma4 as _Simple

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model_wrappers.base import VRHMixin, user_errors_exit


class VRHGemma4(VRHMixin, _Simple):
    vrh_family = "gemma4"

    @user_errors_exit
    def __init__(self, *args, **kwargs) -> None:
        budget = kwargs.get("max_soft_tokens")
        if budget is not None and (not str(budget).isdigit() or int(budget) not in ALLOWED_MAX_SOFT_TOKENS):
            raise VRHError(f"model arg max_soft_tokens={budget!r}: use one of "
                           f"{', '.join(map(str, sorted(ALLOWED_MAX_SOFT_TOKENS)))} (soft tokens per image)")
        if budget is not None:
            kwargs["max_soft_tokens"] = int(budget)
        super().__init__(*args, **kwargs)
