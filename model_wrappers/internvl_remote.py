"""`vrh_internvl3`, `vrh_internvl3_5`, `vrh_internvl2`: lmms-eval's remote-code InternVL backends with head ablation.

These load `InternVLChatModel` (trust_remote_code): the language model is InternLM2 (`attention.wo`), Qwen2/Qwen3,
Llama or Phi-3 (`self_attn.o_proj`) under `language_model.model.layers` (family `internvl_chat`). They answer
through `model.chat(...)`, which calls `self.generate(pixel_values=..., input_ids=..., attention_mask=...)` on the
model: code that wraps `model.generate` sees the exact inputs. Batch size is 1 (the backends assert it).
"""

from __future__ import annotations

from lmms_eval.models.simple.internvl2 import InternVL2 as _InternVL2
from lmms_eval.models.simple.internvl3 import InternVL3 as _InternVL3
from lmms_eval.models.simple.internvl3_5 import InternVL3_5 as _InternVL3_5

from vrh_lmms.model.capture.extras import RemoteInternVLProcessor
from vrh_lmms.model_wrappers.base import VRHMixin
from vrh_lmms.model_wrappers.cpu_fallback import CudaToCpuFallback


class _ConfigFix:
    """lmms-eval's internvl2 backend never sets `_config`, so its `config` property fails; fill it in. These
    backends have no HF processor: `vrh_processor` describes their own tiling for the image-token layout."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if "_config" not in self.__dict__:
            self._config = self.model.config

    @property
    def vrh_processor(self) -> RemoteInternVLProcessor:
        return RemoteInternVLProcessor.from_backend(self)


class VRHInternVL3(_ConfigFix, VRHMixin, CudaToCpuFallback, _InternVL3):
    vrh_family = "internvl_chat"
    vrh_max_batch_size = 1  # lmms-eval's internvl3 asserts batch size 1


class VRHInternVL3_5(_ConfigFix, VRHMixin, CudaToCpuFallback, _InternVL3_5):
    vrh_family = "internvl_chat"


class VRHInternVL2(_ConfigFix, VRHMixin, CudaToCpuFallback, _InternVL2):
    vrh_family = "internvl_chat"
    vrh_max_batch_size = 1  # lmms-eval's internvl2 asserts batch size 1
