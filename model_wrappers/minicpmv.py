"""`vrh_minicpmv`: our backend for transformers-native MiniCPM-V 4.6 / 4.7 checkpoints, with head ablation.

lmms-eval 0.7.3's `minicpm_v` backend loads `AutoModel` with remote code and answers through the remote model's
`chat(...)`; a transformers-native checkpoint has no `chat` (AutoModel gives the bare `MiniCPMV4_6Model`), so that
backend cannot answer it. Here each request becomes one user turn of the checkpoint's chat template
(model_wrappers/chat_backend.py: its images, then the task's text), which MiniCPMV4_6Processor expands to the source
view and the slices; batches are left padded, decoding greedy unless the task sets a temperature.

The published checkpoints' text is Qwen3.5, a hybrid decoder: its linear-attention layers have no heads, its
full-attention layers (every fourth) do, and heads keep their decoder layer's index (`L3H0`); a head named in a
linear-attention layer is refused from the checkpoint's config, before any weight loads.
"""

from __future__ import annotations

import contextlib
from typing import Any

from vrh_lmms.base.families import get_family
from vrh_lmms.base.heads import paper
from vrh_lmms.base.heads.spec import check_explicit_heads
from vrh_lmms.harness.preload import config_geometry, load_config
from vrh_lmms.model_wrappers.base import VRHMixin
from vrh_lmms.model_wrappers.chat_backend import ChatTemplateBackend


def check_heads_before_load(pretrained: str, spec: str | None) -> None:
    """Explicit heads against the geometry the checkpoint's config declares, before any weight loads: the
    published checkpoints' Qwen3.5 text has heads only in its full-attention layers (every fourth), and a head in
    a linear-attention layer is refused in one line naming the layers that have heads."""
    if spec is None or str(spec).startswith(paper.PREFIX):
        return
    geometry = config_geometry(load_config(pretrained), get_family("minicpmv"))
    if geometry is not None:
        check_explicit_heads(spec, geometry)


class VRHMiniCPMV(VRHMixin, ChatTemplateBackend):
    backend_name = "vrh_minicpmv"
    vrh_family = "minicpmv"

    def _vrh_load_context(self, args: tuple, kwargs: dict[str, Any]) -> contextlib.AbstractContextManager:
        check_heads_before_load(str(kwargs.get("pretrained") or args[0]), getattr(self, "vrh_spec_text", None))
        return super()._vrh_load_context(args, kwargs)
