"""`vrh_molmo2`: our backend for Molmo 2 (lmms-eval 0.7.3 has none, and its generic `huggingface` backend fails on
transformers 5.25), with head ablation.

Each request becomes one user turn of the checkpoint's chat template: its images (one `<|image|>` each) then the
task's text, which Molmo2Processor expands to the low- and high-resolution views; batches are left padded. Grounding
tasks ask Molmo 2 to point (it was trained to answer `<points coords=...>`, never boxes; docs/models.md), and the
answer keeps the `<points ...>` markup, which is plain text in its vocabulary.
"""

from __future__ import annotations

from typing import Any

import torch
from PIL import Image
from transformers import AutoProcessor, Molmo2ForConditionalGeneration
from vrh_lmms.model_wrappers.base import VRHMixin
from vrh_lmms.model_wrappers.own_backend import VRHOwnBackend


def molmo2_messages(context: str, n_images: int) -> list[dict[str, Any]]:
    """One user turn: the images, then the task's text."""
    return [{"role": "user", "content": [*([{"type": "image"}] * n_images), {"type": "text", "text": context}]}]


class Molmo2Backend(VRHOwnBackend):
    backend_name = "vrh_molmo2"
    default_max_new_tokens = 128

    def load_model(self, pretrained: str, **kwargs: Any) -> torch.nn.Module:
        return Molmo2ForConditionalGeneration.from_pretrained(pretrained, **kwargs)

    def load_processor(self, pretrained: str) -> Any:
        return AutoProcessor.from_pretrained(pretrained)

    def build_inputs(self, contexts: list[str], images: list[list[Image.Image]]) -> dict[str, Any]:
        prompts = [self.processor.apply_chat_template(molmo2_messages(c, len(imgs)), add_generation_prompt=True,
                                                      tokenize=False) for c, imgs in zip(contexts, images)]
        flat = [image for imgs in images for image in imgs]
        return dict(self.processor(text=prompts, images=flat or None, return_tensors="pt", padding=True,
                                   padding_side="left"))


class VRHMolmo2(VRHMixin, Molmo2Backend):
    vrh_family = "molmo2"
