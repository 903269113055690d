"""`vrh_hf`: lmms-eval's generic `huggingface` chat backend, for any image-text-to-text checkpoint, with head ablation.

The decoder is found without a family record (vrh_lmms.model.generic.survey): from config.json alone, on the meta
device, before any weight loads, so a checkpoint whose heads cannot be cut (an encoder-decoder, a hybrid decoder
with linear-attention layers, heads of different widths, a fused output) stops with one line saying why.
docs/models.md lists every model type and what works on it.

Two corrections to the backend (lmms-eval 0.7.3 with transformers 5.x), neither of which changes what it computes:
- it picks the model class by comparing `config.model_type` (a string) with mappings keyed by config classes, so it
  always falls back to `AutoModel`, the bare model without a language head or `generate`; this wrapper loads the
  class `AutoModelForImageTextToText` maps the config to (else `AutoModelForCausalLM`'s);
- it calls the processor with `audios=`, which transformers 5 refuses at the first generate ("use 'audio'"); this
  wrapper's processor takes `audios=` as `audio=` and leaves out the empty image, video and audio lists (some
  processors refuse an empty list where they accept none).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import lmms_eval.models.chat.huggingface as _hf_module
from lmms_eval.models.chat.huggingface import Huggingface as _Chat
from transformers import AutoConfig

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import paper
from vrh_lmms.base.heads.spec import check_explicit_heads
from vrh_lmms.model.backbone import Decoder, survey_decoder
from vrh_lmms.model.generic import Survey, model_class_for, survey, survey_checkpoint
from vrh_lmms.model_wrappers.base import VRHMixin, with_call

DEFAULT_PRETRAINED = "Qwen/Qwen2.5-VL-3B-Instruct"  # the backend's own default


class _ImageTextModel:
    """Stands in for the backend's `AutoModel` while it loads: the class transformers maps the config to."""

    @staticmethod
    def from_pretrained(pretrained: Any, *args: Any, trust_remote_code: bool = False, **kwargs: Any):
        if "torch_dtype" in kwargs:  # transformers 5 names it dtype
            kwargs.setdefault("dtype", kwargs.pop("torch_dtype"))
        config = AutoConfig.from_pretrained(pretrained, trust_remote_code=trust_remote_code)
        return model_class_for(config).from_pretrained(pretrained, *args, trust_remote_code=trust_remote_code,
                                                       **kwargs)


@contextlib.contextmanager
def image_text_class() -> Iterator[None]:
    """While the backend loads, each of its model-class choices loads the image-text-to-text class."""
    names = ("AutoModel", "AutoModelForCausalLM", "AutoModelForImageTextToText")
    saved = {name: getattr(_hf_module, name) for name in names}
    _hf_module.AutoModel = _ImageTextModel
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(_hf_module, name, value)


_PROCESSOR_CLASSES: dict[type, type] = {}
_MEDIA = ("images", "videos", "audio")


def _processor_call(self, *args: Any, **kwargs: Any):
    """The processor's call with `audios=` read as `audio=` and empty media lists left out."""
    if "audios" in kwargs:
        kwargs.setdefault("audio", kwargs.pop("audios"))
    for name in _MEDIA:
        if name in kwargs and (kwargs[name] is None or (isinstance(kwargs[name], (list, tuple))
                                                       and not kwargs[name])):
            del kwargs[name]
    return super(type(self), self).__call__(*args, **kwargs)


def media_processor(processor: Any) -> Any:
    """Give the backend's processor a subclass (same name) whose call is `_processor_call`."""
    return with_call(processor, _processor_call, _PROCESSOR_CLASSES)


def check_cuttable(found: Survey, pretrained: str) -> Survey:
    if not found.ok:
        raise VRHError(f"vrh_hf: pretrained={pretrained} ({found.model_type}, {found.class_name}): its heads cannot "
                       f"be cut: {found.refusal}")
    return found


class VRHHf(VRHMixin, _Chat):
    """Any image-text-to-text checkpoint through lmms-eval's `huggingface` chat backend (`--model vrh_hf`)."""

    vrh_family = "hf"
    is_simple = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        media_processor(self.processor)

    def _vrh_load_context(self, args: tuple, kwargs: dict[str, Any]) -> contextlib.AbstractContextManager:
        pretrained = str(kwargs.get("pretrained") or (args[0] if args else DEFAULT_PRETRAINED))
        trust = str(kwargs.get("trust_remote_code", False)).lower() in ("1", "true", "yes")
        found = check_cuttable(survey_checkpoint(pretrained, trust_remote_code=trust), pretrained)  # before any weight
        spec = getattr(self, "vrh_spec_text", None)
        if not str(spec).startswith(paper.PREFIX):
            check_explicit_heads(spec, found.geometry)  # e.g. a head in a linear-attention layer, before the load
        return image_text_class()

    def _vrh_locate(self, model: Any, family: Any) -> Decoder:
        self.vrh_survey = check_cuttable(survey(model), str(getattr(self, "vrh_pretrained", None) or ""))
        return survey_decoder(self.vrh_survey)

    @staticmethod
    def _vrh_check_model_type(model: Any, family: Any) -> None:
        """Any model type is this wrapper's (the survey refuses those whose heads cannot be cut)."""
