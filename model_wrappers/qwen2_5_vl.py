"""`vrh_qwen25`: lmms-eval's qwen2_5_vl backend (simple and chat) with head ablation."""

from __future__ import annotations

from lmms_eval.models.chat.qwen2_5_vl import Qwen2_5_VL as _Chat
from lmms_eval.models.simple.qwen2_5_vl import Qwen2_5_VL as _Simple
from vrh_lmms.model_wrappers.base import VRHMixin


class VRHQwen25(VRHMixin, _Simple):
    vrh_family = "qwen2_5_vl"


class VRHQwen25Chat(VRHMixin, _Chat):
    vrh_family = "qwen2_5_vl"
    is_simple = False
