"""`vrh_glm4v`: lmms-eval's glm4v backend (simple only) with head ablation.

Two corrections to the backend, which matter for ablation studies:
- it picks the MoE class whenever "Flash" is not in the checkpoint name, which loads GLM-4.1V, local copies and tiny
  test checkpoints with the wrong class; this wrapper picks the class from the checkpoint's config instead;
- it pads batches on the tokenizer's side (right, unless the tokenizer says otherwise), which shifts the answers of
  the shorter prompts; this wrapper pads on the left, so batch size 2 answers as batch size 1 does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import lmms_eval.models.simple.glm4v as _glm4v_module
import transformers
from lmms_eval.models.simple.glm4v import GLM4V as _Simple
from transformers import AutoConfig

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model_wrappers.base import VRHMixin

_CLASS_NAMES = {"glm4v": "Glm4vForConditionalGeneration", "glm4v_moe": "Glm4vMoeForConditionalGeneration"}


@contextlib.contextmanager
def glm_class_from_config(pretrained: str) -> Iterator[None]:
    """While the backend loads, both of its class names point at the class the config asks for."""
    model_type = getattr(AutoConfig.from_pretrained(pretrained), "model_type", None)
    if model_type not in _CLASS_NAMES:
        raise VRHError(f"vrh_glm4v: checkpoint {pretrained} has model_type {model_type!r}; expected glm4v or glm4v_moe")
    cls = getattr(transformers, _CLASS_NAMES[model_type])
    saved = {name: getattr(_glm4v_module, name) for name in _CLASS_NAMES.values()}
    for name in _CLASS_NAMES.values():
        setattr(_glm4v_module, name, cls)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(_glm4v_module, name, value)


class VRHGLM4V(VRHMixin, _Simple):
    vrh_family = "glm4v"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.processor.tokenizer.padding_side = "left"
        self._tokenizer.padding_side = "left"

    def _vrh_load_context(self, args: tuple, kwargs: dict[str, Any]) -> contextlib.AbstractContextManager:
        pretrained = kwargs.get("pretrained") or (args[0] if args else "zai-org/GLM-4.6V-Flash")
        return glm_class_from_config(str(pretrained))
