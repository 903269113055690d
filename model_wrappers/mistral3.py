"""`vrh_mistral3`: lmms-eval's mistral3_vl backend (simple) with head ablation, for Mistral 3 checkpoints
(Mistral-Small-3.1 / 3.2, Ministral 3).

The backend writes its own prompt (`<s>[INST][IMG]\\n{question}[/INST]`), answers one request at a time with
`repetition_penalty=1.2`, and returns "" for a request whose generate raised; the wrapper keeps all of that.
"""

from __future__ import annotations

from lmms_eval.models.simple.mistral3_vl import Mistral3_VL as _Simple
from vrh_lmms.model_wrappers.base import VRHMixin


class VRHMistral3(VRHMixin, _Simple):
    vrh_family = "mistral3"
