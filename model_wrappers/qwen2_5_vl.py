"""`vrh_qwen25`: lmms-eval's qwen2_5_vl backend (simple and chat) with head ablation."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from lmms_eval.models.chat.qwen2_5_vl import Qwen2_5_VL as _Chat
from lmms_eval.models.simple.qwen2_5_vl import Qwen2_5_VL as _Simple

from vrh_lmms.base.boxes import context
from vrh_lmms.base.boxes.backends import backend_box_params
from vrh_lmms.base.errors import VRHError
from vrh_lmms.model_wrappers.base import VRHMixin, user_errors_exit

IMAGE_POSITIONS = ("before_prompt", "after_prompt")
_PLACEHOLDER = re.compile(r"<image \d+>")


def with_image_after_prompt(context: str, n_images: int = 1) -> str:
    """Simple backend: one `interleave_visuals` placeholder per image, in order, appended unless the task already
    placed its images (the backend passes only the images placeholders name)."""
    if _PLACEHOLDER.search(context):
        return context
    return context + "".join(f" <image {i}>" for i in range(1, n_images + 1))


def text_before_media(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat backend: every message's text parts moved ahead of its images (order otherwise kept)."""
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            texts = [c for c in content if c.get("type") == "text"]
            message = {**message, "content": texts + [c for c in content if c.get("type") != "text"]}
        out.append(message)
    return out


def _with_argument(request, index: int, value: Any):
    """A shallow copy of an lmms-eval Instance with one request argument replaced."""
    clone = copy.copy(request)
    args = list(request.args)
    args[index] = value
    clone.arguments = tuple(args)
    return clone


def _reordered(doc_to_messages: Callable) -> Callable:
    return lambda doc: text_before_media(doc_to_messages(doc))


class ImagePositionMixin:
    """`image_position=after_prompt`: the image follows the request, for models trained with the prompt first."""

    @user_errors_exit
    def __init__(self, *args, image_position: str = "before_prompt", **kwargs: Any) -> None:
        if image_position not in IMAGE_POSITIONS:
            raise VRHError(f"image_position={image_position!r}: expected one of {', '.join(IMAGE_POSITIONS)}")
        if image_position == "after_prompt" and getattr(self, "is_simple", True):
            kwargs["interleave_visuals"] = True
        self.vrh_image_position = image_position
        super().__init__(*args, **kwargs)

    def generate_until(self, requests):
        if self.vrh_image_position == "after_prompt":
            if self.is_simple:
                requests = [_with_argument(r, 0, with_image_after_prompt(r.args[0], self._vrh_n_visuals(r)))
                            for r in requests]
            else:
                requests = [_with_argument(r, 1, _reordered(r.args[1])) for r in requests]
        return super().generate_until(requests)

    def _vrh_n_visuals(self, request) -> int:
        """How many visuals the simple request's doc has (its doc_to_visual on the doc)."""
        _, _, doc_to_visual, doc_id, task, split = request.args
        return len(doc_to_visual(self.task_dict[task][split][doc_id]) or [])


class BackendResizeMixin:
    """Announce the resize this backend really applies: the simple path passes its pixel limits to qwen_vl_utils,
    the chat path does not (vrh_lmms.base.boxes.backends)."""

    def _vrh_activate_box_convention(self, name: str) -> None:
        seen = backend_box_params(self)
        if seen is None or seen[0] != name:
            super()._vrh_activate_box_convention(name)
            return
        context.set_active(name, **seen[1])


class VRHQwen25(BackendResizeMixin, ImagePositionMixin, VRHMixin, _Simple):
    vrh_family = "qwen2_5_vl"


class VRHQwen25Chat(BackendResizeMixin, ImagePositionMixin, VRHMixin, _Chat):
    vrh_family = "qwen2_5_vl"
    is_simple = False
