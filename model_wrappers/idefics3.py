"""`vrh_idefics3` / `vrh_smolvlm`: lmms-eval's idefics2 backend (simple) with head ablation, for Idefics3 and SmolVLM
checkpoints.

Correction: the backend loads every checkpoint with `Idefics2ForConditionalGeneration`, which cannot hold an
Idefics3 or SmolVLM model; while it loads, that name points at the class the checkpoint's config asks for
(`AutoModelForImageTextToText`). Everything else (chat template, processor call, `do_image_splitting=False` unless
given, generate) is the backend's, except that batches are padded on the left (the backend pads on the tokenizer's
side, and a right-padding tokenizer makes the shorter prompts generate after pad tokens). SmolVLM's processor needs
`num2words`: without it, one line says so before any load.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from typing import Any

import lmms_eval.models.simple.idefics2 as _idefics2_module
from lmms_eval.models.simple.idefics2 import Idefics2 as _Simple
from transformers import AutoConfig, AutoModelForImageTextToText

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model_wrappers.base import VRHMixin

MODEL_TYPES = ("idefics3", "smolvlm")


@contextlib.contextmanager
def class_from_config(pretrained: str) -> Iterator[None]:
    """While the backend loads, its `Idefics2ForConditionalGeneration` is the Auto class (checked: Idefics3/SmolVLM)."""
    model_type = getattr(AutoConfig.from_pretrained(pretrained), "model_type", None)
    if model_type not in MODEL_TYPES:
        raise VRHError(f"vrh_idefics3: checkpoint {pretrained} has model_type {model_type!r}; expected "
                       f"{' or '.join(MODEL_TYPES)}")
    if model_type == "smolvlm" and importlib.util.find_spec("num2words") is None:
        raise VRHError(f"vrh_smolvlm: {pretrained} is a SmolVLM checkpoint, whose processor needs the Python package "
                       "num2words (pip install num2words)")
    saved = _idefics2_module.Idefics2ForConditionalGeneration
    _idefics2_module.Idefics2ForConditionalGeneration = AutoModelForImageTextToText
    try:
        yield
    finally:
        _idefics2_module.Idefics2ForConditionalGeneration = saved


class VRHIdefics3(VRHMixin, _Simple):
    vrh_family = "idefics3"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._processor.tokenizer.padding_side = "left"  # the backend pads batches on the tokenizer's side

    def _vrh_load_context(self, args: tuple, kwargs: dict[str, Any]) -> contextlib.AbstractContextManager:
        pretrained = kwargs.get("pretrained") or (args[0] if args else "HuggingFaceTB/SmolVLM-Instruct")
        return class_from_config(str(pretrained))
