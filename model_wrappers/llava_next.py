"""`vrh_llava_next`: lmms-eval's llava_hf backend (simple and chat) with head ablation, for LLaVA-NeXT checkpoints.

llava_hf also loads LLaVA-1.5 and LLaVA-OneVision; their decoders sit at the same path, so ablation works, but the
family (box convention, image layout) is LLaVA-NeXT's, and the mixin warns when the checkpoint is another type.
"""

from __future__ import annotations

from lmms_eval.models.chat.llava_hf import LlavaHf as _Chat
from lmms_eval.models.simple.llava_hf import LlavaHf as _Simple

from vrh_lmms.model_wrappers.base import VRHMixin


class VRHLlavaNext(VRHMixin, _Simple):
    vrh_family = "llava_next"
    vrh_max_batch_size = 1  # llava_hf asserts batch size 1 in generate_until


class VRHLlavaNextChat(VRHMixin, _Chat):
    vrh_family = "llava_next"
    vrh_max_batch_size = 1
    is_simple = False
