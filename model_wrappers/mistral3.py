"""`vrh_mistral3`: lmms-eval's mistral3_vl backend (simple) with head ablation, for Mistral 3 checkpoints
(Mistral-Small-3.1 / 3.2, Ministral 3).

The backend writes its own prompt (`<s>[INST][IMG]\\n{question}[/INST]`) and answers one request at a time with
`repetition_penalty=1.2`; the wrapper keeps all of that. Correction: the backend turns any error while building
inputs or generating into an empty answer (logging "Error during generation"); the wrapper raises it once the batch
is done instead, so a broken run never reads as a complete one.
"""

from __future__ import annotations

from lmms_eval.models.simple.mistral3_vl import Mistral3_VL as _Simple

from vrh_lmms.model_wrappers.base import VRHMixin
from vrh_lmms.model_wrappers.logged_errors import generate_raising_logged_errors

_BACKEND_MODULE = _Simple.__module__
_ERROR_PREFIX = "Error during generation: "


class VRHMistral3(VRHMixin, _Simple):
    vrh_family = "mistral3"

    def generate_until(self, requests):
        return generate_raising_logged_errors(
            "vrh_mistral3", _BACKEND_MODULE,
            lambda text: text[len(_ERROR_PREFIX):] if text.startswith(_ERROR_PREFIX) else None,
            lambda: super(VRHMistral3, self).generate_until(requests), len(requests))
