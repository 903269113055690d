"""`vrh_molmo2`: our backend for Molmo 2 (lmms-eval 0.7.3 has none, and its generic `huggingface` backend fails on
transformers 5.25), with head ablation.

Each request becomes one user turn of the checkpoint's chat template (model_wrappers/chat_backend.py): its images
(one `<|image|>` each), then the task's text, which Molmo2Processor expands to the low- and high-resolution views;
batches are left padded. Grounding tasks ask Molmo 2 to point (it was trained to answer `<points coords=...>`, never
boxes; docs/models.md), and the answer keeps the `<points ...>` markup, which is plain text in its vocabulary.
"""

from __future__ import annotations

from vrh_lmms.model_wrappers.base import VRHMixin
from vrh_lmms.model_wrappers.chat_backend import ChatTemplateBackend


class VRHMolmo2(VRHMixin, ChatTemplateBackend):
    backend_name = "vrh_molmo2"
    vrh_family = "molmo2"
