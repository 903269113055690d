"""Many head configurations from one `generate`: each call answers for the whole pack, later calls are replayed.

A sweep evaluates configurations one lmms-eval pass after another, so each configuration keeps lmms-eval's own
request building, scoring and sample files. `PackedGenerate` replaces `model.generate` on the model instance (as
discovery's interceptor does) while a pack of configurations is being served:

- The first time a backend asks for some inputs, the call runs once for every configuration of the pack whose pass
  is still to come: transformers' own `_expand_inputs_for_generation` (the path beam search uses) is asked for K
  copies of every row, after the vision tower has encoded each image once (`mm_encoder_outputs`, computed before
  expansion); `RowAblator` gives copy k of each row the head set of configuration k.
- Each configuration's rows are cut back to the length a batch of only its rows would have had (the longest of
  them, up to and including its end-of-sequence token; after it, generate pads) and stored under a fingerprint of
  the call's inputs.
- When the pass of a later configuration makes the same call, the stored answer is returned without running the
  model. A call that cannot be packed exactly (sampling, beam search, a model whose `generate` or vision path
  transformers does not own) runs for the served configuration alone, so answers never depend on the pack.
- Every run decodes as `decode` says (vrh_lmms.model.decoding: a static cache, with CUDA graphs on CUDA, or the dynamic
  cache); the answers are the same tokens either way.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn
from transformers import GenerationMixin

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model.ablation import RowAblator, RowConfig
from vrh_lmms.model.backbone import Decoder
from vrh_lmms.model.decoding import DEFAULT as DEFAULT_DECODE
from vrh_lmms.model.decoding import Decoding
from vrh_lmms.model.shared_prefill import SharedPrefill

# inputs that recorded calls (`PackedGenerate.collect`) may hold before they are run: ~280 docs of a 7B VLM's
# 640x480 pixels, a few thousand of the demo model's
COLLECT_BYTES = 2 << 30
# generate kwargs under which one call's rows cannot be split into independent per-configuration answers
_UNPACKABLE_KWARGS = ("assistant_model", "streamer", "stopping_criteria", "stop_strings", "prefix_allowed_tokens_fn",
                      "logits_processor", "negative_prompt_ids", "custom_generate", "synced_gpus")


def packing_unsupported(model: nn.Module) -> str | None:
    """Why this model cannot serve packed configurations (None: it can)."""
    if not isinstance(model, GenerationMixin):
        return f"{type(model).__name__} has no transformers generate"
    if getattr(type(model), "generate", None) is not GenerationMixin.generate:
        return f"{type(model).__name__} overrides transformers' generate with its own, which packing cannot expand"
    if getattr(type(model), "_expand_inputs_for_generation", None) is None:
        return f"{type(model).__name__} cannot expand its inputs"
    supports = getattr(model, "_supports_mm_encoder_outputs", None)
    modalities = getattr(model, "input_modalities", ())
    if any(m in ("image", "video") for m in modalities) and not (supports and supports()):
        return f"{type(model).__name__} cannot take precomputed vision features, so images would be encoded K times"
    return None


def _tensor_digest(value: torch.Tensor) -> bytes:
    t = value.detach().cpu().contiguous()
    h = hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode())
    if t.numel():
        h.update(memoryview(t.view(-1).view(torch.uint8).numpy()))
    return h.digest()


def fingerprint(args: tuple, kwargs: dict[str, Any], known: dict[int, tuple] | None = None,
                pixels: bool = True) -> str:
    """Exact identity of a call (generate's, a processor's): every tensor's, array's and image's dtype or mode,
    shape and bytes, every other value's repr. `known` keeps each tensor's digest with a weak reference to it and its
    version counter (which any in-place change bumps), so a call made again with the very same tensors hashes no
    bytes. `pixels=False`: tensors, arrays and images by dtype or mode and shape only (their bytes are not read)."""
    h = hashlib.sha256()  # hardware-accelerated on most CPUs: ~1 GB/s, a few ms per batch of images

    def feed(name: str, value: Any) -> None:
        h.update(name.encode())
        if not pixels and isinstance(value, (torch.Tensor, np.ndarray)):
            h.update(f"{value.dtype}{tuple(value.shape)}".encode())
        elif not pixels and isinstance(value, Image.Image):
            h.update(f"{value.mode}{value.size}".encode())
        elif isinstance(value, torch.Tensor):
            entry = known.get(id(value)) if known is not None else None
            if entry is None or entry[0]() is not value or entry[1] != value._version:
                entry = (weakref.ref(value), value._version, _tensor_digest(value))
                if known is not None:
                    known[id(value)] = entry
            h.update(entry[2])
        elif isinstance(value, np.ndarray):
            h.update(f"{value.dtype}{value.shape}".encode())
            h.update(np.ascontiguousarray(value).tobytes())
        elif isinstance(value, Image.Image):
            h.update(f"{value.mode}{value.size}".encode())
            h.update(value.tobytes())
        elif isinstance(value, dict):
            for k in sorted(value, key=str):
                feed(f"{name}.{k}", value[k])
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                feed(f"{name}[{i}]", v)
        else:
            h.update(repr(value).encode())

    for i, a in enumerate(args):
        feed(f"arg{i}", a)
    for k in sorted(kwargs):
        feed(k, kwargs[k])
    return h.hexdigest()


def _token_ids(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, torch.Tensor):
        return [int(v) for v in value.flatten().tolist()]
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    return [int(value)]


def alone_length(new_tokens: torch.Tensor, eos_ids: Sequence[int]) -> int:
    """How many new tokens a batch of exactly these rows returns: generate stops when every row has emitted an
    end-of-sequence token (and pads the rows that finished earlier), or at the length limit."""
    width = new_tokens.shape[1]
    if not eos_ids or width == 0:
        return width
    is_eos = torch.isin(new_tokens, torch.tensor(list(eos_ids), device=new_tokens.device))
    ended = is_eos.any(1)
    if not bool(ended.all()):
        return width
    first = is_eos.int().argmax(1)
    return int(first.max()) + 1


@dataclass
class PackStats:
    packed_calls: int = 0  # generate runs that answered several configurations at once
    solo_calls: int = 0  # runs for the served configuration alone
    replayed: int = 0  # calls answered from an earlier packed run
    rows: list[int] = field(default_factory=list)  # batch rows of each packed run


class PackedGenerate:
    """Serves configuration `current` of a pack; see the module docstring. Use as a context manager."""

    def __init__(self, model: nn.Module, decoder: Decoder, configs: Sequence[RowConfig],
                 means: torch.Tensor | None = None, method: str = "auto", decode: str = DEFAULT_DECODE,
                 share_prefill: bool = True) -> None:
        reason = packing_unsupported(model)
        if reason is not None and len(configs) > 1:
            raise VRHError(f"cannot pack configurations: {reason}; use --pack 1")
        self.model = model
        self.rows = RowAblator(decoder, configs, means=means, method=method)
        # rows of one doc compute their common layers once in the prefill; False: every row runs every layer
        self.shared = SharedPrefill(decoder, self.rows) if share_prefill else None
        self.n = len(configs)
        self.current = 0
        self.stats = PackStats()
        self._stored: list[dict[str, torch.Tensor]] = [{} for _ in range(self.n)]
        self._collected: dict[str, dict[str, Any]] | None = None  # calls recorded by `collect`
        self._digests: dict[int, tuple] = {}  # input tensors' digests (`fingerprint`), kept while the pack is served
        self._original = None
        self.decoding = Decoding(model, decode)

    @property
    def method(self) -> str:
        return self.rows.method

    # ------------------------------------------------------------------------------------------- serving
    def serve(self, index: int) -> None:
        """From now on, answer as configuration `index` (configurations are served in order)."""
        if not 0 <= index < self.n:
            raise VRHError(f"configuration {index} outside the pack of {self.n}")
        for done in range(index):
            self._stored[done].clear()
        self.current = index
        self.rows.solo(index)

    def install(self) -> PackedGenerate:
        if "generate" in self.model.__dict__:
            raise VRHError("model.generate is already intercepted; packing cannot be combined with that")
        self._original = self.model.generate
        self.model.generate = self._generate
        self.rows.install()
        if self.shared is not None:
            self.shared.install()
        self.serve(self.current)
        return self

    def uninstall(self) -> None:
        self.model.__dict__.pop("generate", None)
        self.model.__dict__.pop("_expand_inputs_for_generation", None)
        if self.shared is not None:
            self.shared.uninstall()
        self.rows.uninstall()
        self._digests.clear()
        for stored in self._stored:
            stored.clear()

    def __enter__(self) -> PackedGenerate:
        return self.install()

    def __exit__(self, *exc) -> None:
        self.uninstall()

    # ------------------------------------------------------------------------------------------ generate
    def _generation_value(self, kwargs: dict[str, Any], name: str) -> Any:
        if name in kwargs:
            return kwargs[name]
        config = kwargs.get("generation_config") or getattr(self.model, "generation_config", None)
        return getattr(config, name, None)

    def _packable(self, args: tuple, kwargs: dict[str, Any]) -> bool:
        if args or self.current == self.n - 1 or packing_unsupported(self.model) is not None:
            return False
        if not isinstance(kwargs.get("input_ids"), torch.Tensor) or kwargs.get("inputs_embeds") is not None:
            return False
        if any(kwargs.get(k) is not None for k in _UNPACKABLE_KWARGS):
            return False
        if self._generation_value(kwargs, "do_sample") or (self._generation_value(kwargs, "num_beams") or 1) > 1:
            return False
        if (self._generation_value(kwargs, "num_return_sequences") or 1) > 1:
            return False
        if self._generation_value(kwargs, "return_dict_in_generate"):
            return False
        return self._generation_value(kwargs, "cache_implementation") in (None, "dynamic", "static")

    def _generate(self, *args, **kwargs):
        key = fingerprint(args, kwargs, self._digests)
        stored = self._stored[self.current].pop(key, None)
        if stored is not None:
            self.stats.replayed += 1
            return stored
        if self._collected is not None and isinstance(kwargs.get("input_ids"), torch.Tensor):
            if self._packable(args, kwargs) and key not in self._collected:
                self._collected[key] = kwargs
                self._collected_bytes += tensor_bytes(kwargs)
                if self._collected_bytes > self._collect_budget:  # inputs held in memory: run what is there
                    self._run_collected()
            return kwargs["input_ids"].clone()  # no new tokens: this pass only learns which calls the docs make
        if not self._packable(args, kwargs):
            self.stats.solo_calls += 1
            self.rows.solo(self.current)
            return self._decode(args, kwargs)
        self._run_rows([(key, kwargs)])
        return self._stored[self.current].pop(key)

    def _decode(self, args: tuple, kwargs: dict[str, Any]):
        """The original generate with this pack's decode mode; a static run the family refuses (an error raised
        by transformers or torch.compile) is said once and runs again with the dynamic cache."""
        call = self.decoding.kwargs(kwargs)
        if call is kwargs:
            return self._original(*args, **kwargs)
        try:
            return self._original(*args, **call)
        except (RuntimeError, TypeError, ValueError, NotImplementedError) as exc:
            if isinstance(exc, (torch.OutOfMemoryError, VRHError)):
                raise
            self.decoding.fall_back(f"static cache failed ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})")
            return self._original(*args, **kwargs)

    # ------------------------------------------------------------------------------- docs x configurations
    def collect(self, rows_for: Callable[[int], int], budget_bytes: int | None = None) -> None:
        """Until `generate_collected`, record the packable calls instead of running them (each is answered with its
        prompt and no new tokens; the pass that makes them is a dry run whose answers are thrown away). Whenever the
        recorded calls' tensors exceed `budget_bytes` (default COLLECT_BYTES), they are run (`_run_collected`) and
        recording goes on."""
        self._collected, self._collected_bytes = {}, 0
        self._rows_for, self._collect_budget = rows_for, COLLECT_BYTES if budget_bytes is None else budget_bytes

    def generate_collected(self) -> None:
        """Run the calls recorded since `collect` and stop recording."""
        self._run_collected()
        self._collected = None

    def _run_collected(self) -> None:
        """Run the recorded calls for every configuration still to be served, several calls' rows in one generate
        where their inputs can be stacked without padding (`merge_signature`: same prompt length, same shapes
        but the first), at most `rows_for(prompt + new tokens)` batch rows (calls x rows x configurations) per
        generate. Later passes get their answers back by fingerprint; each is what a batch of only its own rows
        would have returned."""
        calls, self._collected, self._collected_bytes = list((self._collected or {}).items()), {}, 0
        rows_for = self._rows_for
        k = self.n - self.current
        groups: dict[Any, list[tuple[str, dict[str, Any]]]] = {}
        for key, kwargs in calls:
            groups.setdefault(merge_signature(kwargs) or key, []).append((key, kwargs))
        for members in groups.values():
            first = members[0][1]
            new_tokens = self._generation_value(first, "max_new_tokens") or 0
            max_rows = rows_for(int(first["input_ids"].shape[1]) + int(new_tokens))
            chunk: list[tuple[str, dict[str, Any]]] = []
            rows = 0
            for key, kwargs in members:
                batch = int(kwargs["input_ids"].shape[0])
                if chunk and (rows + batch) * k > max_rows:
                    self._run_rows(chunk)
                    chunk, rows = [], 0
                chunk.append((key, kwargs))
                rows += batch
            if chunk:
                self._run_rows(chunk)

    def _run_rows(self, calls: list[tuple[str, dict[str, Any]]]) -> None:
        """One generate for `calls` (stacked) x every configuration still to be served; each configuration's rows of
        each call are stored under the call's fingerprint, cut to the length the call alone would have returned."""
        pending = list(range(self.current, self.n))
        k = len(pending)
        kwargs = stack_calls([kw for _, kw in calls])
        input_ids = kwargs["input_ids"]
        batch, prompt = input_ids.shape
        expand = type(self.model)._expand_inputs_for_generation

        def expand_k(*a, expand_size: int = 1, **kw):
            return expand(self.model, *a, expand_size=expand_size * k, **kw)

        self.model._expand_inputs_for_generation = expand_k
        layout = [c for _ in range(batch) for c in pending]
        self.rows.set_rows(layout)
        if self.shared is not None:
            self.shared.arm(layout, rows_per_doc=k)
        try:
            out = self._decode((), kwargs)
        finally:
            self.model.__dict__.pop("_expand_inputs_for_generation", None)
            if self.shared is not None:
                self.shared.disarm()
            self.rows.solo(self.current)
        if not isinstance(out, torch.Tensor) or out.shape[0] != batch * k or out.shape[1] < prompt:
            raise VRHError(f"packed generate returned {type(out).__name__} {getattr(out, 'shape', '')}; expected "
                           f"{batch * k} rows that start with the prompt")
        self.stats.packed_calls += 1
        self.stats.rows.append(batch * k)
        eos = _token_ids(self._generation_value(kwargs, "eos_token_id"))
        start = 0
        for key, call in calls:
            size = int(call["input_ids"].shape[0])
            block = out[start * k:(start + size) * k]
            start += size
            for j, config in enumerate(pending):
                rows = block[j::k]
                self._stored[config][key] = rows[:, :prompt + alone_length(rows[:, prompt:], eos)].clone()


# tensors listed per image (or video) in batch order rather than per row: stacked calls concatenate them as well
_ITEM_MAJOR = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw", "second_per_grid_ts")


def tensor_bytes(value: Any) -> int:
    """Bytes of the tensors in `value`: a tensor, a dict (or a processor's BatchFeature, whose `data` is one), a list
    or tuple of them; anything else counts 0."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict) or hasattr(value, "data") and isinstance(getattr(value, "data"), dict):
        items = value.values() if isinstance(value, dict) else value.data.values()
        return sum(tensor_bytes(v) for v in items)
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    return 0


def merge_signature(kwargs: dict[str, Any]) -> tuple | None:
    """What must be equal for generate calls to be run as one by stacking their inputs along the first dimension:
    every value but the tensors, each tensor's dtype, device and shape after its first dimension (which must be
    the batch, or an item dimension of `_ITEM_MAJOR`). None: this call is run alone."""
    input_ids = kwargs.get("input_ids")
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        return None
    batch = input_ids.shape[0]
    parts = []
    for name in sorted(kwargs):
        value = kwargs[name]
        if isinstance(value, torch.Tensor):
            if value.dim() == 0 or (value.shape[0] != batch and name not in _ITEM_MAJOR):
                return None
            parts.append((name, str(value.dtype), str(value.device), tuple(value.shape[1:])))
        elif isinstance(value, (str, int, float, bool, type(None))):
            parts.append((name, repr(value)))
        else:
            return None
    return tuple(parts)


def stack_calls(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The kwargs of calls with equal `merge_signature`, as one call: tensors concatenated along dimension 0."""
    if len(calls) == 1:
        return calls[0]
    return {name: torch.cat([c[name] for c in calls]) if isinstance(value, torch.Tensor) else value
            for name, value in calls[0].items()}


# ------------------------------------------------------------------------------------------------ exactness checks
def step_logits(model: nn.Module, batch: dict[str, torch.Tensor], prefix: torch.Tensor) -> torch.Tensor:
    """Next-token logits of every row after its prompt and `prefix` (rows x t generated tokens): what generate
    computes at step t, recomputed in full instead of from the cache."""
    t = prefix.shape[1]
    step = dict(batch, input_ids=torch.cat([batch["input_ids"], prefix], 1))
    if batch.get("attention_mask") is not None:
        step["attention_mask"] = torch.cat([batch["attention_mask"], torch.ones_like(prefix)], 1)
    if batch.get("token_type_ids") is not None:  # generate repeats the last type (PaliGemma's suffix tokens)
        types = batch["token_type_ids"]
        step["token_type_ids"] = torch.cat([types, types[:, -1:].expand(-1, t)], 1)
    if batch.get("mm_token_type_ids") is not None:  # generated tokens are text
        step["mm_token_type_ids"] = torch.cat([batch["mm_token_type_ids"], torch.zeros_like(prefix)], 1)
    with torch.no_grad():
        return model(**step).logits[:, -1].float()


def divergence_gap(model: nn.Module, batch: dict[str, torch.Tensor], want: torch.Tensor, got: torch.Tensor,
                   row: int) -> float:
    """Where row `row` of two generate outputs first differs, the logit gap between the two tokens chosen there,
    under the model as it is now (set it up as the configuration that produced `want`). A gap near 0 means the
    two answers split at a near-tie, which batch-size-dependent kernel rounding may decide either way."""
    prompt = batch["input_ids"].shape[1]
    n = min(want.shape[1], got.shape[1])
    differs = want[row, prompt:n] != got[row, prompt:n]
    if not bool(differs.any()):
        raise VRHError(f"row {row} of the two outputs does not differ within {n - prompt} new tokens")
    t = int(differs.int().argmax())
    logits = step_logits(model, batch, want[:, prompt:prompt + t])[row]
    return float((logits[want[row, prompt + t]] - logits[got[row, prompt + t]]).abs())
