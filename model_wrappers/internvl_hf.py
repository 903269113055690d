"""`vrh_internvl`: lmms-eval's internvl_hf backend (chat only; the `-hf` checkpoints of InternVL3 / 3.5) with
head ablation. The remote-code checkpoints go through `vrh_internvl3`, `vrh_internvl3_5` and `vrh_internvl2`."""

from __future__ import annotations

from lmms_eval.models.chat.internvl_hf import InternVLHf as _Chat

from vrh_lmms.model_wrappers.base import VRHMixin


class VRHInternVLChat(VRHMixin, _Chat):
    vrh_family = "internvl"
    is_simple = False
    vrh_max_batch_size = 1  # internvl_hf asserts batch size 1
