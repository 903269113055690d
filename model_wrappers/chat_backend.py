"""Our backend for transformers-native checkpoints whose processor reads the chat template (Molmo 2, MiniCPM-V
4.6 / 4.7), for families lmms-eval has no usable backend for.

Each request becomes one user turn of the checkpoint's chat template: its images (one image item each), then the
task's text; the processor expands each image placeholder to the family's image tokens. The model class comes from
the config (`AutoModelForImageTextToText`). Batching, left padding, greedy decoding and `until` are
`VRHOwnBackend`'s.
"""

from __future__ import annotations

from typing import Any

import torch
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor

from vrh_lmms.model_wrappers.own_backend import VRHOwnBackend


def chat_messages(context: str, n_images: int) -> list[dict[str, Any]]:
    """One user turn: the images, then the task's text."""
    return [{"role": "user", "content": [*([{"type": "image"}] * n_images), {"type": "text", "text": context}]}]


class ChatTemplateBackend(VRHOwnBackend):
    backend_name = "vrh_chat_template"
    default_max_new_tokens = 128

    def load_model(self, pretrained: str, **kwargs: Any) -> torch.nn.Module:
        return AutoModelForImageTextToText.from_pretrained(pretrained, **kwargs)

    def load_processor(self, pretrained: str) -> Any:
        return AutoProcessor.from_pretrained(pretrained)

    def build_inputs(self, contexts: list[str], images: list[list[Image.Image]]) -> dict[str, Any]:
        prompts = [self.processor.apply_chat_template(chat_messages(c, len(imgs)), add_generation_prompt=True,
                                                      tokenize=False) for c, imgs in zip(contexts, images)]
        flat = [image for imgs in images for image in imgs]
        return dict(self.processor(text=prompts, images=flat or None, return_tensors="pt", padding=True,
                                   padding_side="left"))
