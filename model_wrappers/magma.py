"""`vrh_magma`: our backend for Magma-8B (remote code; lmms-eval has none), with head ablation.

Follows Magma's own lmms-eval integration: the system prompt "You are agent that can see, talk and act.", one
`<image>` per image before the task text (wrapped in `<image_start>`/`<image_end>` when the config says
`mm_use_image_start_end`), the tokenizer's chat template, and the processor's pixel values / image sizes with a
leading batch axis. Magma's processor has no padded batch mode, so this backend runs one sample at a time.
The decoder is Llama-3 under `language_model.model.layers`.
"""

from __future__ import annotations

from typing import Any

import torch
from PIL import Image
from transformers import AutoModelForCausalLM, AutoProcessor

from vrh_lmms.model_wrappers.base import VRHMixin
from vrh_lmms.model_wrappers.own_backend import VRHOwnBackend

SYSTEM_PROMPT = "You are agent that can see, talk and act."


class MagmaBackend(VRHOwnBackend):
    backend_name = "vrh_magma"
    max_batch_size = 1
    remote_code = True

    def load_model(self, pretrained: str, **kwargs: Any) -> torch.nn.Module:
        return AutoModelForCausalLM.from_pretrained(pretrained, trust_remote_code=self.trust_remote_code, **kwargs)

    def load_processor(self, pretrained: str) -> Any:
        return AutoProcessor.from_pretrained(pretrained, trust_remote_code=self.trust_remote_code)

    def prompt(self, context: str, n_images: int) -> str:
        convs = [{"role": "system", "content": SYSTEM_PROMPT},
                 {"role": "user", "content": "<image>\n" * n_images + context.replace("<image>", "").strip()}]
        text = self.tokenizer.apply_chat_template(convs, tokenize=False, add_generation_prompt=True)
        if getattr(self.model.config, "mm_use_image_start_end", False):
            text = text.replace("<image>", "<image_start><image><image_end>")
        return text

    def build_inputs(self, contexts: list[str], images: list[list[Image.Image]]) -> dict[str, Any]:
        (context,), (imgs,) = contexts, images
        inputs = dict(self.processor(images=imgs or None, texts=self.prompt(context, len(imgs)),
                                     return_tensors="pt"))
        for key in ("pixel_values", "image_sizes"):
            if key in inputs:
                inputs[key] = inputs[key].unsqueeze(0)
        return inputs


class VRHMagma(VRHMixin, MagmaBackend):
    vrh_family = "magma"
