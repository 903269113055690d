"""`vrh_minicpmv`: our backend for transformers-native MiniCPM-V 4.6 / 4.7 checkpoints, with head ablation.

lmms-eval 0.7.3's `minicpm_v` backend loads `AutoModel` with remote code and answers through the remote model's
`chat(...)`; a transformers-native checkpoint has no `chat` (AutoModel gives the bare `MiniCPMV4_6Model`), so that
backend cannot answer it. Here each request becomes one user turn of the checkpoint's chat template (its images,
then the task's text), which MiniCPMV4_6Processor expands to the source view and the slices; batches are left padded,
decoding greedy unless the task sets a temperature.
"""

from __future__ import annotations

from typing import Any

import torch
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor
from vrh_lmms.model_wrappers.base import VRHMixin
from vrh_lmms.model_wrappers.molmo2 import molmo2_messages as chat_messages
from vrh_lmms.model_wrappers.own_backend import VRHOwnBackend


class MiniCPMVBackend(VRHOwnBackend):
    backend_name = "vrh_minicpmv"
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


class VRHMiniCPMV(VRHMixin, MiniCPMVBackend):
    vrh_family = "minicpmv"
