"""Uniform-attention ablation: a chosen head's answer rows attend uniformly instead of where they looked.

Zeroing a head removes its output altogether; a uniform head still writes a (content-free) average of the values,
so the comparison isolates *where* the head looks from *that* it writes at all. Two variants (ablation modes):

  uniform        each answer row of the head averages the values of every key it may see (its causal prefix;
                 padding, sliding windows and bidirectional prefixes as the model's own mask says);
  uniform_image  the same average over the image tokens only (those the row may see).

Answer rows are the positions >= prompt_len - 1 (vrh_lmms.model.interventions.rows), so inside `generate` these are the
last prompt position and every generated token; no row looks at a future token. The layer output is computed by the
model's own attention function (through the registered function of vrh_lmms.model.capture.attention) and only the chosen
(head, answer row) entries are replaced, so every other head and row is bit-identical to the intact model.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import HeadRef
from vrh_lmms.model.backbone import locate_decoder, unwrap
from vrh_lmms.model.capture.attention import install_attention_edits
from vrh_lmms.model.interventions.rows import CallRows, RowTracker, is_causal_call, keys_in_window, visible

UNIFORM_OVER = {"uniform": "prefix", "uniform_image": "image"}  # ablation mode -> what the rows average over


def image_token_ids(model: nn.Module) -> list[int]:
    """The image placeholder id(s) of a VLM, from its config (image_token_id / image_token_index)."""
    model = unwrap(model)
    configs = [model.config, getattr(model.config, "text_config", None)]
    for cfg in configs:
        for name in ("image_token_id", "image_token_index"):
            value = getattr(cfg, name, None) if cfg is not None else None
            if isinstance(value, int) and value >= 0:
                return [value]
            if isinstance(value, (list, tuple)) and value:
                return [int(v) for v in value]
    raise VRHError(f"{type(model).__name__} names no image_token_id in its config; uniform_image needs it")


class _ImagePositions:
    """Forward pre-hook on the whole model: the image placeholders of the sequence it starts (prefill)."""

    def __init__(self, model: nn.Module, token_ids: Sequence[int]) -> None:
        self.ids = torch.tensor(list(token_ids))
        self.mask: torch.Tensor | None = None
        self.handle = unwrap(model).register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if isinstance(ids, torch.Tensor) and ids.dim() == 2:
            cache = kwargs.get("past_key_values", kwargs.get("cache"))  # transformers >= 5.2 names it `cache`
            seen = cache.get_seq_length() if cache is not None and hasattr(cache, "get_seq_length") else 0
            if int(seen) == 0:
                self.mask = torch.isin(ids, self.ids.to(ids.device))
        return None

    def remove(self) -> None:
        self.handle.remove()


class _UniformEdit:
    def __init__(self, heads_by_layer: dict[int, list[int]], over: str, images: _ImagePositions | None,
                 prompt_len: int | None) -> None:
        self.heads, self.over, self.images, self.prompt_len = heads_by_layer, over, images, prompt_len
        self.rows = RowTracker()
        self._calls: dict[int, CallRows] = {}

    def edit_mask(self, layer, module, query, key, attention_mask, kwargs, base):
        self._calls[layer] = self.rows.step(layer, query.shape[2], key.shape[2], query.device)
        return attention_mask

    def edit_output(self, layer, module, query, key, value, attention_mask, kwargs, base, output):
        call = self._calls.pop(layer)
        answer = torch.nonzero(call.answer_rows(self.prompt_len)).flatten()
        if answer.numel() == 0:
            return output
        b, n_heads, q_len, _ = query.shape
        kv_len = key.shape[2]
        allowed = visible(attention_mask, b, q_len, kv_len, base, is_causal_call(module, kwargs), query.device)
        if self.over == "image":
            if self.images is None or self.images.mask is None:
                raise VRHError("uniform_image ablation saw no input_ids for this sequence (it needs the image "
                               "placeholders; models that generate from inputs_embeds are not supported)")
            if self.images.mask.shape[0] != b:
                raise VRHError(f"uniform_image: image positions for batch {self.images.mask.shape[0]}, "
                               f"attention batch {b}")
            allowed = allowed & keys_in_window(self.images.mask.to(query.device), call.key_start, kv_len)[:, None,
                                                                                                            None]
        rep = n_heads // value.shape[1]
        out = output.clone()
        for h in self.heads[layer]:
            a = allowed[:, h if allowed.shape[1] > 1 else 0][:, answer].float()  # (b, rows, kv)
            weights = a / a.sum(-1, keepdim=True).clamp(min=1.0)
            out[:, answer, h] = torch.matmul(weights, value[:, h // rep].float()).to(out.dtype)
        return out


class UniformAblation:
    """Replace the answer-row attention of `heads` by uniform attention until `remove()` (or use `uniform_ablated`).

    over: "prefix" (the row's causal prefix) or "image" (the image tokens in it). prompt_len: answer rows start at
    prompt_len - 1; None means the first call of each sequence is the prompt (what `generate` does)."""

    def __init__(self, model: nn.Module, heads: Iterable[HeadRef], over: str = "prefix",
                 prompt_len: int | None = None) -> None:
        if over not in UNIFORM_OVER.values():
            raise VRHError(f"uniform ablation over {over!r}: use one of {', '.join(UNIFORM_OVER.values())}")
        self.model = unwrap(model)
        self.heads = sorted(set(heads))
        geometry = locate_decoder(self.model).geometry
        for h in self.heads:
            geometry.check(h, where="uniform-ablated head")
        self.over = over
        by_layer: dict[int, list[int]] = {}
        for h in self.heads:
            by_layer.setdefault(h.layer, []).append(h.head)
        self._images = _ImagePositions(self.model, image_token_ids(self.model)) if over == "image" else None
        edit = _UniformEdit(by_layer, over, self._images, prompt_len)
        try:
            self.base, self._remove = install_attention_edits(self.model, {layer: edit for layer in by_layer})
        except BaseException:
            if self._images is not None:
                self._images.remove()
            raise

    def remove(self) -> None:
        self._remove()
        if self._images is not None:
            self._images.remove()
            self._images = None


@contextmanager
def uniform_ablated(model: nn.Module, heads: Iterable[HeadRef], over: str = "prefix",
                    prompt_len: int | None = None) -> Iterator[UniformAblation]:
    ablation = UniformAblation(model, heads, over, prompt_len)
    try:
        yield ablation
    finally:
        ablation.remove()
