"""`vrh_qwen3`: lmms-eval's qwen3_vl backend (simple and chat) with head ablation."""

from __future__ import annotations

from lmms_eval.models.chat.qwen3_vl import Qwen3_VL as _Chat
from lmms_eval.models.simple.qwen3_vl import Qwen3_VL as _Simple

from vrh_lmms.model_wrappers.base import VRHMixin


class VRHQwen3(VRHMixin, _Simple):
    vrh_family = "qwen3_vl"


class VRHQwen3Chat(VRHMixin, _Chat):
    vrh_family = "qwen3_vl"
    is_simple = False
