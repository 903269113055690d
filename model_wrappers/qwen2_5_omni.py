"""`vrh_qwen25_omni`: lmms-eval's qwen2_5_omni backend (simple only) with head ablation on the thinker's decoder.

Four corrections to the backend (lmms-eval 0.7.3 with transformers 5.x), none of which changes what it computes:
- it loads its processor from the hub id "Qwen/Qwen2.5-Omni-7B" whatever `pretrained` says; this wrapper loads the
  checkpoint's own processor (the same files for the real model, and the only ones offline or for other checkpoints);
- it calls `Qwen2_5OmniForConditionalGeneration.generate(return_audio=False, thinker_do_sample=False, ...)`, which
  in transformers 5 reads the talker the backend has just removed and raises; this wrapper routes that call to the
  thinker's own `generate` (what the original does for text answers), with the same arguments;
- it turns any error in generate into an empty answer; this wrapper raises it once the batch is done instead, so an
  ablation run never scores a crash as a wrong answer.
- with `use_audio_in_video` it hands the processor each video's audio track without saying which video it belongs
  to, which transformers 5.25 refuses; this wrapper's processor names them (`audio_from_video_indices`).
It also assigns `cuda:<rank>` whenever `device_map` is not "auto"; without CUDA that becomes the CPU.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model_wrappers.base import VRHMixin, unavailable_backend, user_errors_exit, with_call
from vrh_lmms.model_wrappers.cpu_fallback import CudaToCpuFallback

try:
    import lmms_eval.models.simple.qwen2_5_omni as _omni_module
    from lmms_eval.models.simple.qwen2_5_omni import Qwen2_5_Omni as _Simple

    MISSING: str | None = None
except ModuleNotFoundError as exc:  # librosa, moviepy or qwen_omni_utils (the `omni` extra) is not installed
    MISSING = exc.name or str(exc)
    _omni_module = None

    _Simple = unavailable_backend(lambda: missing_error())  # type: ignore[misc]


def missing_error() -> VRHError:
    return VRHError(f"vrh_qwen25_omni needs the Python package {MISSING!r}, which lmms-eval's qwen2_5_omni backend "
                    f"imports; install it with: pip install 'vrh-lmms[omni]'")

DEFAULT_PRETRAINED = "Qwen/Qwen2.5-Omni-7B"


@contextlib.contextmanager
def processor_from(pretrained: str) -> Iterator[None]:
    """While the backend loads, its `Qwen2_5OmniProcessor.from_pretrained(<hub id>)` reads `pretrained` instead."""
    real = _omni_module.Qwen2_5OmniProcessor

    class _FromCheckpoint:
        @staticmethod
        def from_pretrained(*args: Any, **kwargs: Any):
            return real.from_pretrained(pretrained, **kwargs)

    _omni_module.Qwen2_5OmniProcessor = _FromCheckpoint
    try:
        yield
    finally:
        _omni_module.Qwen2_5OmniProcessor = real


def _generate(self, input_ids=None, *, use_audio_in_video: bool = False, return_audio: bool = False,
              speaker: str | None = None, **kwargs: Any):
    """The top-level generate as the backend calls it, answered by the thinker (text only, no talker)."""
    if return_audio:
        raise VRHError("vrh_qwen25_omni answers in text only (return_audio=True asked)")
    for key in [k for k in kwargs if k.startswith("thinker_")]:
        kwargs[key[len("thinker_"):]] = kwargs.pop(key)  # thinker_* overrides the plain argument, as upstream
    for key in [k for k in kwargs if k.startswith(("talker_", "token2wav_"))]:
        kwargs.pop(key)
    try:
        return self.thinker.generate(input_ids=input_ids, use_audio_in_video=use_audio_in_video, **kwargs)
    except Exception as exc:  # the backend swallows it into ""; the wrapper raises it after the batch
        self.__dict__.setdefault("vrh_generate_errors", []).append(exc)
        raise


def _forward(self, *args: Any, **kwargs: Any):
    """The thinker's forward: teacher-forced captures call the model the backend generates with. They pass tensors
    only, so `use_audio_in_video` (which sets TMRoPE's positions) is read from the ids as generate had it: a video
    whose audio track rides along opens its block with <|audio_bos|> followed by video tokens."""
    if "use_audio_in_video" not in kwargs and kwargs.get("input_ids") is not None:
        kwargs["use_audio_in_video"] = has_audio_in_video(kwargs["input_ids"], self.config.thinker_config)
    return self.thinker(*args, **kwargs)


def has_audio_in_video(input_ids: Any, thinker_config: Any) -> bool:
    """Whether the prompt holds a video interleaved with its audio track (use_audio_in_video)."""
    ids = input_ids
    starts = ids[..., :-1] == thinker_config.audio_start_token_id
    return bool((starts & (ids[..., 1:] == thinker_config.video_token_index)).any())


_THINKER_CLASSES: dict[type, type] = {}
_PROCESSOR_CLASSES: dict[type, type] = {}


def audio_sources(text: str | list[str], audio_token: str, video_token: str) -> list[int | None]:
    """`audio_from_video_indices` for a prompt whose videos carry their audio: one entry per audio slot, in the
    order qwen_omni_utils collects them (content order), None for a standalone clip, v for the v-th video."""
    texts = [text] if isinstance(text, str) else list(text)
    pattern = re.compile(f"{re.escape(audio_token)}|{re.escape(video_token)}")
    out: list[int | None] = []
    video = 0
    for t in texts:
        for found in pattern.finditer(t):
            if found.group() == audio_token:
                out.append(None)
            else:
                out.append(video)
                video += 1
    return out


def _processor_call(self, *args: Any, use_audio_in_video: bool = False, **kwargs: Any):
    """The processor's call; with `use_audio_in_video` and audio, names which audio slot is which video's track
    (transformers 5.25 counts every unnamed clip as standalone and refuses the prompt)."""
    if use_audio_in_video and kwargs.get("audio") is not None and "audio_from_video_indices" not in kwargs:
        kwargs["audio_from_video_indices"] = audio_sources(kwargs.get("text", args[0] if args else ""),
                                                           self.audio_token, self.video_token)
    return super(type(self), self).__call__(*args, use_audio_in_video=use_audio_in_video, **kwargs)


def audio_from_video_processor(processor: Any) -> Any:
    """Give the backend's processor a subclass (same name) whose call names the videos' audio tracks."""
    return with_call(processor, _processor_call, _PROCESSOR_CLASSES)


def thinker_answering(model: Any) -> Any:
    """Give the loaded model a subclass (same name) whose generate and forward are the thinker's. A class, not
    instance attributes: discovery and tests wrap `model.generate` on the instance and delete their wrapper after."""
    cls = type(model)
    if cls not in _THINKER_CLASSES:
        _THINKER_CLASSES[cls] = type(cls.__name__, (cls,), {"generate": _generate, "forward": _forward,
                                                            "__module__": cls.__module__, "__doc__": _forward.__doc__})
    model.__class__ = _THINKER_CLASSES[cls]
    return model


class VRHQwen25Omni(VRHMixin, CudaToCpuFallback, _Simple):
    vrh_family = "qwen2_5_omni"
    # lmms-eval's qwen2_5_omni puts a batch's docs into one conversation and gets one answer for all of them (then
    # fails an assertion): one doc per call
    vrh_max_batch_size = 1

    @user_errors_exit
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if MISSING is not None:
            raise missing_error()
        super().__init__(*args, **kwargs)
        thinker_answering(self.model)
        audio_from_video_processor(self.processor)

    def _vrh_load_context(self, args: tuple, kwargs: dict[str, Any]) -> contextlib.AbstractContextManager:
        pretrained = kwargs.get("pretrained") or (args[0] if args else DEFAULT_PRETRAINED)
        return processor_from(str(pretrained))

    def generate_until(self, requests):
        errors = self.model.__dict__.setdefault("vrh_generate_errors", [])
        errors.clear()
        out = super().generate_until(requests)
        if errors:
            raise VRHError(f"vrh_qwen25_omni: generate failed on {len(errors)} of {len(requests)} requests: "
                           f"{type(errors[0]).__name__}: {errors[0]}") from errors[0]
        return out
