"""`vrh_llava_onevision1_5`: lmms-eval's llava_onevision1_5 backend (simple and chat) with head ablation, for
LLaVA-OneVision-1.5 checkpoints in transformers' own format (`LlavaOnevision15ForConditionalGeneration`, model type
`llava_onevision1_5`: the `-hf` checkpoints; transformers 5.25 and later).

Correction: the backend loads with `AutoModelForCausalLM` and `trust_remote_code=True`, written for the original
remote-code checkpoints; transformers maps llava_onevision1_5 to no causal-LM class, so a transformers-format
checkpoint (or a local copy without the remote code) fails to load. While the backend loads, that name points at
`AutoModelForImageTextToText` (the config's model type is checked first). Everything else is the backend's: the
checkpoint's chat template with its system prompt, images resized by qwen_vl_utils (its own bounds) and then by the
processor at 200,704 to 1,605,632 pixels (the backend's min_pixels / max_pixels), greedy generation.
The simple backend pads a batch on the tokenizer's side, so with a right-padding tokenizer the shorter prompts
generate after pad tokens: the wrapper pads left (the chat backend does so itself). The chat backend turns a failed
generate into an empty answer (logging "Error ... in generating"): the wrapper raises it once the batch is done, so
a broken run never reads as a complete one.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from typing import Any

import lmms_eval.models.simple.llava_onevision1_5 as _backend_module
import transformers
from lmms_eval.models.chat.llava_onevision1_5 import Llava_OneVision1_5 as _Chat
from lmms_eval.models.simple.llava_onevision1_5 import Llava_OneVision1_5 as _Simple
from transformers import AutoConfig, AutoModelForImageTextToText

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model_wrappers.base import VRHMixin
from vrh_lmms.model_wrappers.logged_errors import generate_raising_logged_errors

MODEL_TYPE = "llava_onevision1_5"
_CHAT_MODULE = _Chat.__module__


@contextlib.contextmanager
def image_text_class(pretrained: str) -> Iterator[None]:
    """While the backend loads, its `AutoModelForCausalLM` is `AutoModelForImageTextToText` (checked: the config
    says llava_onevision1_5). A transformers without the class is refused in one line before any load."""
    if importlib.util.find_spec("transformers.models.llava_onevision1_5") is None:
        raise VRHError(f"vrh_llava_onevision1_5 needs a transformers with LlavaOnevision15ForConditionalGeneration "
                       f"(5.25 has it); installed: {transformers.__version__}")
    model_type = getattr(AutoConfig.from_pretrained(pretrained), "model_type", None)
    if model_type != MODEL_TYPE:
        raise VRHError(f"vrh_llava_onevision1_5: checkpoint {pretrained} has model_type {model_type!r}; expected "
                       f"{MODEL_TYPE} (a transformers-format LLaVA-OneVision-1.5 checkpoint)")
    saved = _backend_module.AutoModelForCausalLM
    _backend_module.AutoModelForCausalLM = AutoModelForImageTextToText
    try:
        yield
    finally:
        _backend_module.AutoModelForCausalLM = saved


class _ImageTextClass:
    def _vrh_load_context(self, args: tuple, kwargs: dict[str, Any]) -> contextlib.AbstractContextManager:
        pretrained = kwargs.get("pretrained") or (args[0] if args else "lmms-lab/LLaVA-OneVision-1.5-8B-Instruct")
        return image_text_class(str(pretrained))


class VRHLlavaOneVision15(_ImageTextClass, VRHMixin, _Simple):
    vrh_family = "llava_onevision1_5"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.processor.tokenizer.padding_side = "left"  # the backend pads batches on the tokenizer's side


class VRHLlavaOneVision15Chat(_ImageTextClass, VRHMixin, _Chat):
    vrh_family = "llava_onevision1_5"
    is_simple = False

    def generate_until(self, requests):
        def error_of(text: str) -> str | None:
            ok = text.startswith("Error ") and text.endswith(" in generating")
            return text[len("Error "):-len(" in generating")] if ok else None

        return generate_raising_logged_errors("vrh_llava_onevision1_5", _CHAT_MODULE, error_of,
                                              lambda: super(VRHLlavaOneVision15Chat, self).generate_until(requests),
                                              len(requests))
