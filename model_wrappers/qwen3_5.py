"""`vrh_qwen3_5`: lmms-eval's qwen3_5 backend (simple and chat) with head ablation, for Qwen3.5 dense and MoE.

The backend is Qwen3-VL's with Qwen3.5 defaults (thinking on, 64-128 x 32 px cells per image, sampling at 0.7 unless
the task sets a temperature). Correction: it picks the MoE class when the checkpoint's name contains `A<n>B`
(`Qwen3.5-35B-A3B`), so a local copy, a renamed or a tiny MoE checkpoint loads with the dense class (and a dense one
named so, the MoE class); this wrapper picks the class from the checkpoint's config (`qwen3_5` / `qwen3_5_moe`).

The text decoder is hybrid: Gated DeltaNet linear-attention layers (no softmax heads) and a full-attention layer
every 4th in the published checkpoints; heads exist only in the full-attention layers and keep their decoder layer
index (`L3H0` is head 0 of decoder layer 3).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import lmms_eval.models.simple.qwen3_vl as _qwen3_vl_module
from lmms_eval.models.chat.qwen3_5 import Qwen3_5 as _Chat
from lmms_eval.models.simple.qwen3_5 import Qwen3_5 as _Simple
from transformers import AutoConfig, Qwen3_5ForConditionalGeneration, Qwen3_5MoeForConditionalGeneration

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model_wrappers.base import VRHMixin

_CLASSES = {"qwen3_5": Qwen3_5ForConditionalGeneration, "qwen3_5_moe": Qwen3_5MoeForConditionalGeneration}


@contextlib.contextmanager
def qwen3_5_class_from_config(pretrained: str) -> Iterator[None]:
    """While the backend loads, its class resolver answers with the class the checkpoint's config names."""
    model_type = getattr(AutoConfig.from_pretrained(pretrained), "model_type", None)
    if model_type not in _CLASSES:
        raise VRHError(f"vrh_qwen3_5: checkpoint {pretrained} has model_type {model_type!r}; expected qwen3_5 or "
                       "qwen3_5_moe")
    saved = _qwen3_vl_module._resolve_model_class
    _qwen3_vl_module._resolve_model_class = lambda name, is_moe: (_CLASSES[model_type], "dtype")
    try:
        yield
    finally:
        _qwen3_vl_module._resolve_model_class = saved


class _ClassFromConfig:
    def _vrh_load_context(self, args: tuple, kwargs: dict[str, Any]) -> contextlib.AbstractContextManager:
        pretrained = kwargs.get("pretrained") or (args[0] if args else "Qwen/Qwen3.5-4B")
        return qwen3_5_class_from_config(str(pretrained))


class VRHQwen3_5(_ClassFromConfig, VRHMixin, _Simple):
    vrh_family = "qwen3_5"


class VRHQwen3_5Chat(_ClassFromConfig, VRHMixin, _Chat):
    vrh_family = "qwen3_5"
    is_simple = False
