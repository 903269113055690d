"""`vrh_minicpmv`: our backend for transformers-native MiniCPM-V 4.6 / 4.7 checkpoints, with head ablation.

lmms-eval 0.7.3's `minicpm_v` backend loads `AutoModel` with remote code and answers through the remote model's
`chat(...)`; a transformers-native checkpoint has no `chat` (AutoModel gives the bare `MiniCPMV4_6Model`), so that
backend cannot answer it. Here each request becomes one user turn of the checkpoint's chat template
(model_wrappers/chat_backend.py: its images, then the task's text), which MiniCPMV4_6Processor expands to the source
view and the slices; batches are left padded, decoding greedy unless the task sets a temperature.

The published checkpoints' text is Qwen3.5, whose linear-attention layers have no heads to cut; such a checkpoint is
refused from its config, before any weight loads, naming the layers that are full attention.
"""

from __future__ import annotations

import contextlib
from typing import Any

from transformers import AutoConfig

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model_wrappers.base import VRHMixin
from vrh_lmms.model_wrappers.chat_backend import ChatTemplateBackend


def _spans(layers: list[int]) -> str:
    return ", ".join(map(str, layers[:8])) + (f", ... ({len(layers)} in all)" if len(layers) > 8 else "")


def refuse_hybrid_text(pretrained: str) -> None:
    """One line, from the config alone, when the text decoder has layers that are not full attention."""
    types = list(getattr(AutoConfig.from_pretrained(pretrained).get_text_config(), "layer_types", None) or [])
    other = [i for i, t in enumerate(types) if t != "full_attention"]
    if other:
        full = [i for i, t in enumerate(types) if t == "full_attention"]
        raise VRHError(f"vrh_minicpmv: {pretrained} has a hybrid text decoder ({types[other[0]]} layers "
                       f"{_spans(other)} have no heads to cut; full-attention layers: {_spans(full)}), which "
                       "vrh-lmms cannot ablate yet")


class VRHMiniCPMV(VRHMixin, ChatTemplateBackend):
    backend_name = "vrh_minicpmv"
    vrh_family = "minicpmv"

    def _vrh_load_context(self, args: tuple, kwargs: dict[str, Any]) -> contextlib.AbstractContextManager:
        refuse_hybrid_text(str(kwargs.get("pretrained") or args[0]))
        return super()._vrh_load_context(args, kwargs)
