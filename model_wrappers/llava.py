"""`vrh_llava` (LLaVA-1.5) and `vrh_llava_onevision` (LLaVA-OneVision): lmms-eval's llava_hf backend (simple and
chat), which loads both model types natively, with head ablation.

lmms-eval's own `llava_onevision` backend runs the original LLaVA-NeXT repository's checkpoints (the `llava`
package); the transformers-native `-hf` checkpoints go through llava_hf, as here. Its simple class sends string
message content, which the llava-hf list-only chat templates drop: use the chat class or pass `chat_template=`.
"""

from __future__ import annotations

from lmms_eval.models.chat.llava_hf import LlavaHf as _Chat
from lmms_eval.models.simple.llava_hf import LlavaHf as _Simple

from vrh_lmms.model_wrappers.base import VRHMixin


class VRHLlava(VRHMixin, _Simple):
    vrh_family = "llava"
    vrh_max_batch_size = 1  # llava_hf asserts batch size 1 in generate_until


class VRHLlavaChat(VRHMixin, _Chat):
    vrh_family = "llava"
    vrh_max_batch_size = 1  # llava_hf asserts batch size 1 in generate_until
    is_simple = False


class VRHLlavaOneVision(VRHMixin, _Simple):
    vrh_family = "llava_onevision"
    vrh_max_batch_size = 1  # llava_hf asserts batch size 1 in generate_until


class VRHLlavaOneVisionChat(VRHMixin, _Chat):
    vrh_family = "llava_onevision"
    vrh_max_batch_size = 1  # llava_hf asserts batch size 1 in generate_until
    is_simple = False
