"""Apply a KV policy (vrh_lmms.model.kvcache.policy) to a model during generation: exact masking, or a cache that
shrinks.

Cache semantics: the prompt is prefilled with every key visible (prefill is NOT masked: the rows of the prompt
attend as in the intact model, which is what a cache compressed after prefill gives), then each decode step sees
only the keys its (layer, KV group) kept. So the first answer token, emitted by the last prefill row, is the
intact model's; every later token sees the compressed cache.

* mode ``mask``: inside the registered attention function (vrh_lmms.model.capture.attention) the dropped (group,
  position) keys of every decode call are masked for the query heads of that group. With nothing dropped the mask
  is left untouched, so answers are bit-identical to the intact model's.
* mode ``compress``: as ``mask``, but right after prefill the layers whose KV groups all drop the same positions
  (`policy.shared_drop`: layers holding no kept group under ``retrieval`` / ``random``, every layer under
  ``uniform``) lose those positions from their K/V tensors, so the memory is freed. Such a layer reports its logical
  length (`_Shrunk`), so the model's masks and positions stay those of the full sequence, and its decode masks are
  gathered to the keys kept. Other layers, and sliding-window cache layers (Gemma's), are masked as in ``mask``;
  a sliding-window layer's keys are the last ones of the sequence, and the mask follows their absolute positions.

* mode ``compact``: right after prefill, every layer that drops something (and is a plain dynamic cache layer)
  has each (row, KV group)'s kept prompt keys gathered into one buffer per layer, padded to the layer's largest kept
  count (prompt padding counts as dropped), with room for the answer; decode appends in place. The few padded slots
  are hidden by a mask made once at prefill, so a decode step does no Python-side mask building and no host sync:
  it slices that mask and the buffers. Rows of a batch may keep different counts. Same tokens as ``mask`` (logits
  within float rounding: fewer terms in the softmax sums).

Image positions come from the prefill's input_ids (the config's image token id); in mode ``compress``, batches whose
rows keep different numbers of keys in a shrunk layer are refused (run batch size 1, or mode ``compact``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn
from transformers.cache_utils import DynamicLayer

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model.backbone import locate_decoder, unwrap
from vrh_lmms.model.capture.attention import install_attention_edits
from vrh_lmms.model.interventions.rows import is_causal_call, visible
from vrh_lmms.model.interventions.uniform import image_token_ids
from vrh_lmms.model.kvcache.policy import (
    KVPolicy,
    check_kv_geometry,
    dropped,
    image_kept_fraction,
    kv_bytes,
    shared_drop,
)

MODES = ("mask", "compress", "compact")
COMPACT_ROOM = 64  # answer positions a compact layer's buffers grow by at a time


class _Shrunk(DynamicLayer):
    """A dynamic cache layer some prompt positions were removed from: it reports the logical length."""

    removed: int = 0

    def get_seq_length(self) -> int:
        return super().get_seq_length() + self.removed


class _Compact(DynamicLayer):
    """A layer whose kept prompt keys were compacted into buffers with room for the answer: `update` writes the
    new keys in place (growing by COMPACT_ROOM positions when full) and returns views of the filled part; it
    reports the logical length, so the model's masks and positions stay those of the full sequence."""

    removed: int = 0
    filled: int = 0

    def compact(self, keys: torch.Tensor, values: torch.Tensor, removed: int) -> None:
        self._kbuf, self._vbuf = self._room(keys), self._room(values)
        self.filled, self.removed = keys.shape[-2], removed
        self._views()

    @staticmethod
    def _room(t: torch.Tensor) -> torch.Tensor:
        return torch.cat([t, t.new_zeros(*t.shape[:-2], COMPACT_ROOM, t.shape[-1])], dim=-2)

    def _views(self) -> None:
        self.keys, self.values = self._kbuf[..., :self.filled, :], self._vbuf[..., :self.filled, :]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        n = key_states.shape[-2]
        while self.filled + n > self._kbuf.shape[-2]:
            self._kbuf, self._vbuf = self._room(self._kbuf), self._room(self._vbuf)
        self._kbuf[..., self.filled:self.filled + n, :] = key_states
        self._vbuf[..., self.filled:self.filled + n, :] = value_states
        self.filled += n
        self._views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.filled + self.removed


def _cache_of(kwargs: dict, output) -> object | None:
    cache = kwargs.get("past_key_values", kwargs.get("cache"))  # transformers >= 5.2 names it `cache`
    return cache if cache is not None else getattr(output, "past_key_values", None)


class KVCompression:
    """Apply `policy` to every sequence `model` generates until `remove()` (or use `kv_compressed`)."""

    def __init__(self, model: nn.Module, policy: KVPolicy, mode: str = "mask") -> None:
        if mode not in MODES:
            raise VRHError(f"KV mode {mode!r} unknown; use one of {', '.join(MODES)}")
        self.model, self.policy, self.mode = unwrap(model), policy, mode
        g = check_kv_geometry(locate_decoder(self.model).geometry)
        if policy.groups.shape != (g.layers, g.kv_heads):
            raise VRHError(f"KV policy for {policy.groups.shape} (layers, KV groups); the model has "
                           f"({g.layers}, {g.kv_heads})")
        self.rep, self.head_dim = g.heads // g.kv_heads, g.head_dim
        self.ids = torch.tensor(image_token_ids(self.model))
        self.drop: torch.Tensor | None = None  # (batch, layers, kv_heads, prompt) bool, for the current sequence
        self.prompt_len = 0
        self.shrunk: dict[int, torch.Tensor] = {}  # layer -> (batch, kept) positions still in the cache
        # mode compact: layer -> (prompt keys kept after compaction, (batch, heads, 1, kept + room) bool: real slot)
        self.compacted: dict[int, tuple[int, torch.Tensor]] = {}
        self._seen: dict[int, int] = {}  # layer -> positions cached so far in this sequence (decode calls)
        self._freed = 0  # bytes the shrinking of this prefill's cache should free
        self.stats: list[dict] = []  # per prefill: dropped slots, bytes before / after shrinking
        self._prefill = False
        self._handles = [self.model.register_forward_pre_hook(self._before, with_kwargs=True),
                         self.model.register_forward_hook(self._after, with_kwargs=True)]
        try:
            self.base, self._remove_edits = install_attention_edits(self.model, dict.fromkeys(range(g.layers),
                                                                                              self))
        except BaseException:
            for h in self._handles:
                h.remove()
            raise

    # ------------------------------------------------------------------------------------------ sequence start
    def _before(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        cache = kwargs.get("past_key_values", kwargs.get("cache"))
        seen = cache.get_seq_length() if cache is not None and hasattr(cache, "get_seq_length") else 0
        self._prefill = int(seen) == 0
        if not self._prefill:
            return None
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
            raise VRHError("KV compression saw no input_ids at prefill (it needs the image placeholders)")
        image = torch.isin(ids, self.ids.to(ids.device)).cpu().numpy()
        self._image = image
        self.prompt_len = ids.shape[1]
        self.drop = torch.from_numpy(np.stack([dropped(self.policy, row, self.prompt_len) for row in image]))
        self.shrunk, self._seen, self.compacted = {}, {}, {}
        self._padding = None
        mask = kwargs.get("attention_mask")
        if isinstance(mask, torch.Tensor) and mask.dim() == 2 and mask.shape == ids.shape:
            self._padding = ~mask.bool().cpu()  # (batch, prompt): left padding, dropped by compaction
        return None

    def _after(self, module, args, kwargs, output):
        if not self._prefill or self.drop is None:
            return None
        self._prefill = False
        cache = _cache_of(kwargs, output)
        before = _cache_bytes(cache)
        self._freed = 0
        if self.mode == "compress" and cache is not None:
            self._shrink(cache)
        if self.mode == "compact" and cache is not None:
            self._compact(cache)
        self.stats.append(self._measure(cache, before))
        return None

    def _measure(self, cache, before: int) -> dict:
        """Per prefill: image KV kept, the bytes masking keeps in effect and what shrinking frees (claimed: from the
        policy; cache_bytes_*: tensor nbytes of the cache as held)."""
        lay = cache.layers[0] if cache is not None and getattr(cache, "layers", None) else None
        item = lay.keys.element_size() if lay is not None and lay.keys is not None else 4
        p, d = self.prompt_len, self.head_dim
        drops = [row.numpy() for row in self.drop]
        return {"prompt_len": p, "dropped_slots": int(self.drop.sum()),
                "image_kv_kept": float(np.mean([image_kept_fraction(dr, im, p, self.policy.sink, self.policy.recent)
                                                for dr, im in zip(drops, self._image)])),
                "kv_bytes_full": sum(kv_bytes(np.zeros_like(dr), p, d, item) for dr in drops),
                "kv_bytes_kept": sum(kv_bytes(dr, p, d, item) for dr in drops),
                "kv_bytes_physical": sum(kv_bytes(dr, p, d, item, physical_only=True) for dr in drops),
                "cache_bytes_before": before, "cache_bytes_claimed": before - self._freed,
                "cache_bytes_after": _cache_bytes(cache),
                "shrunk_layers": sorted(self.shrunk), "compacted_layers": sorted(self.compacted)}

    @torch.no_grad()
    def _shrink(self, cache) -> None:
        layers = np.flatnonzero(np.all([shared_drop(d.numpy()) for d in self.drop], axis=0))
        for layer in layers:
            keep = ~self.drop[:, layer, 0]  # (batch, prompt): every group drops the same positions
            counts = keep.sum(-1)
            if not bool((counts == counts[0]).all()):
                raise VRHError(f"KV compression: the rows of this batch keep {counts.tolist()} keys in layer "
                               f"{layer}; run batch size 1")
            lay = cache.layers[int(layer)]
            if type(lay) is not DynamicLayer:  # sliding-window (or other) layers keep their own length: masked
                continue
            held = None if lay.keys is None else lay.keys.shape[-2]
            if held != self.prompt_len:
                raise VRHError(f"KV compression: layer {layer} caches {held} positions after a prefill of "
                               f"{self.prompt_len}; only dynamic caches shrink")
            pos = torch.stack([torch.nonzero(k).flatten() for k in keep]).to(lay.keys.device)  # (batch, kept)
            b, h, _, d = lay.keys.shape
            # what the policy says this layer frees (checked against the tensors' nbytes by the tests)
            self._freed += 2 * b * h * d * lay.keys.element_size() * (self.prompt_len - pos.shape[1])
            index = pos[:, None, :, None].expand(b, h, pos.shape[1], d)
            lay.keys = torch.gather(lay.keys, 2, index)
            lay.values = torch.gather(lay.values, 2, index)
            lay.__class__ = _Shrunk
            lay.removed = self.prompt_len - pos.shape[1]
            self.shrunk[int(layer)] = pos

    @torch.no_grad()
    def _compact(self, cache) -> None:
        """Gather each (row, group)'s kept prompt keys of every dropping layer into padded per-layer buffers."""
        pad = self._padding if self._padding is not None else torch.zeros(self.drop.shape[0], self.prompt_len,
                                                                           dtype=torch.bool)
        for layer in range(self.drop.shape[1]):
            drop = self.drop[:, layer]  # (batch, groups, prompt)
            lay = cache.layers[layer]
            if not bool(drop.any()) or type(lay) is not DynamicLayer or lay.keys is None:
                continue  # nothing dropped here, or a sliding-window (or other) layer: masked as in mode mask
            if lay.keys.shape[-2] != self.prompt_len:
                raise VRHError(f"KV compaction: layer {layer} caches {lay.keys.shape[-2]} positions after a prefill "
                               f"of {self.prompt_len}; only dynamic caches compact")
            keep = ~drop & ~pad[:, None, :]
            kept = int(keep.sum(-1).max())
            # kept positions first (in order), then any position as filler: stable sort of "not kept"
            order = torch.sort((~keep).to(torch.int8), dim=-1, stable=True).indices[..., :kept]
            real = torch.arange(kept)[None, None, :] < keep.sum(-1, keepdim=True)  # (batch, groups, kept)
            b, h, _, d = lay.keys.shape
            index = order.to(lay.keys.device)[..., None].expand(b, h, kept, d)
            keys, values = torch.gather(lay.keys, 2, index), torch.gather(lay.values, 2, index)
            self._freed += 2 * lay.keys.element_size() * b * h * d * (self.prompt_len - kept)
            lay.__class__ = _Compact
            lay.compact(keys, values, self.prompt_len - kept)
            slots = torch.ones(b, h, kept + COMPACT_ROOM, dtype=torch.bool)
            slots[..., :kept] = real
            self.compacted[layer] = (kept, slots.repeat_interleave(self.rep, dim=1)[:, :, None, :]
                                     .to(lay.keys.device))

    def _compact_mask(self, layer, query, key, attention_mask, base):
        """A compacted layer's decode mask: the slots made at prefill for the prompt's kept keys (and the room after
        them), and the model's own mask for the answer's keys; slices and one concatenation, no host sync."""
        kept, slots = self.compacted[layer]
        b, heads, q_len, kv_len = *query.shape[:3], key.shape[2]
        if q_len != 1:
            raise VRHError(f"KV compaction decodes one token per step; a call brought {q_len} (use mode mask)")
        if kv_len > slots.shape[-1]:  # the buffers grew past the room made at prefill
            slots = torch.cat([slots, slots.new_ones(*slots.shape[:-1], kv_len - slots.shape[-1] + COMPACT_ROOM)], -1)
            self.compacted[layer] = (kept, slots)
        allowed = slots[..., :kv_len]
        if attention_mask is not None:
            tail = attention_mask[..., self.prompt_len:self.prompt_len + kv_len - kept]
            tail = tail if tail.dtype == torch.bool else tail > torch.finfo(tail.dtype).min / 2
            allowed = torch.cat([allowed[..., :kept].expand(b, heads, q_len, kept),
                                 tail.expand(b, heads, q_len, kv_len - kept)], dim=-1)
        if base == "sdpa" and (attention_mask is None or attention_mask.dtype == torch.bool):
            return allowed
        dtype = attention_mask.dtype if attention_mask is not None else query.dtype
        return torch.where(allowed, torch.zeros((), dtype=dtype, device=query.device),
                           torch.tensor(torch.finfo(dtype).min, dtype=dtype, device=query.device))

    # ------------------------------------------------------------------------------------------ attention edit
    def edit_mask(self, layer, module, query, key, attention_mask, kwargs, base):
        b, _, q_len, kv_len = *query.shape[:3], key.shape[2]
        if self.drop is None or q_len == kv_len:  # prefill (or a plain forward): every key visible
            return attention_mask
        if layer in self.compacted:
            return self._compact_mask(layer, query, key, attention_mask, base)
        if layer in self.shrunk:  # keys gone from the cache: gather the logical mask to the keys kept
            if attention_mask is None:
                return None
            pos = self.shrunk[layer].to(attention_mask.device)
            new = torch.arange(self.prompt_len, attention_mask.shape[-1], device=attention_mask.device)
            cols = torch.cat([pos, new.expand(pos.shape[0], -1)], dim=1)  # (batch, kv_len)
            m = attention_mask.expand(b, -1, -1, -1)
            return torch.gather(m, 3, cols[:, None, None, :].expand(b, m.shape[1], m.shape[2], cols.shape[1]))
        seen = self._seen.get(layer, self.prompt_len) + q_len  # positions this layer has cached, this call's too
        self._seen[layer] = seen
        drop = self.drop[:, layer]  # (batch, groups, prompt)
        if not bool(drop.any()):
            return attention_mask
        # absolute positions of this call's keys: a sliding-window layer holds only the last kv_len of them
        pos = torch.arange(seen - kv_len, seen)
        prompt = pos < self.prompt_len
        keep = torch.ones(b, query.shape[1], kv_len, dtype=torch.bool)
        keep[..., prompt] = ~drop[..., pos[prompt]].repeat_interleave(self.rep, dim=1)
        keep = keep.to(query.device)
        allowed = visible(attention_mask, b, q_len, kv_len, base, is_causal_call(module, kwargs), query.device)
        allowed = allowed & keep[:, :, None, :]
        if base == "sdpa" and (attention_mask is None or attention_mask.dtype == torch.bool):
            return allowed
        dtype = attention_mask.dtype if attention_mask is not None else query.dtype
        return torch.where(allowed, torch.zeros((), dtype=dtype, device=query.device),
                           torch.tensor(torch.finfo(dtype).min, dtype=dtype, device=query.device))

    def remove(self) -> None:
        self._remove_edits()
        for h in self._handles:
            h.remove()
        self._handles = []


def _cache_bytes(cache) -> int:
    """Bytes of every K and V tensor a cache holds (tensor nbytes)."""
    if cache is None:
        return 0
    return sum(t.nbytes for lay in getattr(cache, "layers", []) for t in (lay.keys, lay.values)
               if isinstance(t, torch.Tensor))


@contextmanager
def kv_compressed(model: nn.Module, policy: KVPolicy, mode: str = "mask") -> Iterator[KVCompression]:
    comp = KVCompression(model, policy, mode)
    try:
        yield comp
    finally:
        comp.remove()
