"""`vrh_paligemma`: our backend for PaliGemma / PaliGemma2 (lmms-eval has none), with head ablation.

Prompts are the task's text after one `<image>` token per image, which PaliGemmaProcessor expands to the image
tokens followed by `<bos>`, and ends with `\\n`. Grounding tasks give PaliGemma its own `detect <expression>`
prompt; the answer keeps the `<locNNNN>` tokens (they are ordinary vocabulary items, not special tokens).
"""

from __future__ import annotations

from typing import Any

import torch
from PIL import Image
from transformers import PaliGemmaForConditionalGeneration, PaliGemmaProcessor

from vrh_lmms.model_wrappers.base import VRHMixin
from vrh_lmms.model_wrappers.own_backend import VRHOwnBackend

IMAGE_TOKEN = "<image>"


def paligemma_prompt(context: str, n_images: int) -> str:
    """`<image>` per image, then the task text (any `<image>` the task wrote is moved to the front)."""
    return IMAGE_TOKEN * n_images + context.replace(IMAGE_TOKEN, "").strip()


class PaliGemmaBackend(VRHOwnBackend):
    backend_name = "vrh_paligemma"
    default_max_new_tokens = 64

    def load_model(self, pretrained: str, **kwargs: Any) -> torch.nn.Module:
        return PaliGemmaForConditionalGeneration.from_pretrained(pretrained, **kwargs)

    def load_processor(self, pretrained: str) -> Any:
        return PaliGemmaProcessor.from_pretrained(pretrained)

    def build_inputs(self, contexts: list[str], images: list[list[Image.Image]]) -> dict[str, Any]:
        prompts = [paligemma_prompt(c, len(imgs)) for c, imgs in zip(contexts, images)]
        has_images = any(images)
        return dict(self.processor(text=prompts, images=images if has_images else None, return_tensors="pt",
                                   padding="longest", padding_side="left"))


class VRHPaliGemma(VRHMixin, PaliGemmaBackend):
    vrh_family = "paligemma"
