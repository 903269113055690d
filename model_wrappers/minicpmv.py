"""`vrh_minicpmv`: our backend for transformers-native MiniCPM-V 4.6 / 4.7 checkpoints, with head ablation.

lmms-eval 0.7.3's `minicpm_v` backend loads `AutoModel` with remote code and answers through the remote model's
`chat(...)`; a transformers-native checkpoint has no `chat` (AutoModel gives the bare `MiniCPMV4_6Model`), so that
backend cannot answer it. Here each request becomes one user turn of the checkpoint's chat template
(model_wrappers/chat_backend.py: its images, then the task's text), which MiniCPMV4_6Processor expands to the source
view and the slices; batches are left padded, decoding greedy unless the task sets a temperature.
"""

from __future__ import annotations

from vrh_lmms.model_wrappers.base import VRHMixin
from vrh_lmms.model_wrappers.chat_backend import ChatTemplateBackend


class VRHMiniCPMV(VRHMixin, ChatTemplateBackend):
    backend_name = "vrh_minicpmv"
    vrh_family = "minicpmv"
