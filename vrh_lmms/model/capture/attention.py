"""Exact, memory-light attention capture for the language decoder, through a registered attention function.

`capture_attention(model, plan)` switches only the text stack to a registered attention function that

* computes the layer output with the model's normal attention (sdpa; the model's own eager function where the
  text model runs eager, e.g. Gemma2 with soft-capping), so logits under capture equal logits without it, and
* rebuilds the softmax rows of the plan's query positions only (vrh_lmms.model.capture.rows) and reduces them at once to
  the mass on each named key set and the argmax key, so memory is O(layers x heads x Q) for the result plus one
  (batch, heads, Q, T) block per layer, never T x T.

The matching mask function is registered under the same name (`AttentionMaskInterface`): without it the model
builds no mask for an unknown implementation and padding is silently ignored. The previous implementation is
restored on exit, also on exceptions.

The same functions carry the attention interventions (vrh_lmms.runs.interventions): a per-layer `AttentionEdit` may
change the layer's mask (steering) or rows of its output (uniform ablation) around the unchanged base computation.
Both capture and edits are hooks on the decoder's named `layers.L.attn_rows` sites (vrh_lmms.model.backbone), installed
and removed through the decoder; the registered function asks the attention module it runs for its hooks.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import nn
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import Geometry, layer_ranges
from vrh_lmms.model.backbone import ATTN_ROWS, Hook, locate_decoder, rows_hooks, site_name, unwrap
from vrh_lmms.model.capture.rows import mask_rows, reduce_rows, row_probs

# Names avoid "sdpa"/"flash"/"flex": transformers applies those backends' dispatch checks to any name containing them.
CAPTURE_IMPL = "vrh_capture"  # output through sdpa, boolean masks
CAPTURE_IMPL_EAGER = "vrh_capture_softmax"  # output through the model's eager function, additive float masks
BASES = {"sdpa": CAPTURE_IMPL, "eager": CAPTURE_IMPL_EAGER}


@dataclass
class CapturePlan:
    """What to capture in one full (teacher-forced, cache-free) forward.

    query_positions: (batch, Q) long positions in the sequence the forward sees; -1 pads a row (no capture).
    key_sets: name -> (batch, T) bool mask of key positions whose attention mass is summed (e.g. "box", "image").
    argmax: also record each row's argmax key position.
    """

    query_positions: torch.Tensor
    key_sets: dict[str, torch.Tensor]
    argmax: bool = True

    def __post_init__(self) -> None:
        qp = self.query_positions
        if qp.dim() != 2 or qp.dtype not in (torch.int64, torch.int32):
            raise VRHError(f"query_positions must be a (batch, Q) integer tensor, got {qp.dtype} {tuple(qp.shape)}")
        for name, ks in self.key_sets.items():
            if ks.dim() != 2 or ks.dtype != torch.bool or ks.shape[0] != qp.shape[0]:
                raise VRHError(f"key set {name!r} must be a (batch={qp.shape[0]}, T) bool tensor, "
                               f"got {ks.dtype} {tuple(ks.shape)}")
        lengths = {ks.shape[1] for ks in self.key_sets.values()}
        if len(lengths) > 1:
            raise VRHError(f"key sets disagree on the sequence length: {sorted(lengths)}")

    @property
    def row_mask(self) -> torch.Tensor:
        return self.query_positions >= 0


@dataclass
class CaptureResult:
    """mass: name -> (batch, layers, heads, Q) float32; argmax: (batch, layers, heads, Q) long, -1 on padded rows."""

    mass: dict[str, torch.Tensor]
    argmax: torch.Tensor | None
    row_mask: torch.Tensor


@dataclass
class CaptureHandle:
    """Collects one forward's per-layer reductions; `result()` after the forward."""

    plan: CapturePlan
    geometry: Geometry
    base: str
    _mass: torch.Tensor | None = None  # (b, L, H, Q, K)
    _argmax: torch.Tensor | None = None
    _seen: set[int] = field(default_factory=set)
    # Per forward: plan tensors on each device (checked once), and mask rows shared by layers with the same mask.
    _on_device: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    _mask_rows: list[tuple[object, bool, torch.Tensor | None]] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return list(self.plan.key_sets)

    def _prepared(self, device: torch.device, q_len: int, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Clamped query rows (b, Q) and stacked key sets (b, T, K) on `device`; validated on first use only."""
        if device not in self._on_device:
            plan = self.plan
            if plan.query_positions.shape[0] != batch:
                raise VRHError(f"plan has batch {plan.query_positions.shape[0]}, the forward batch {batch}")
            for name, ks in plan.key_sets.items():
                if ks.shape[1] != q_len:
                    raise VRHError(f"key set {name!r} has length {ks.shape[1]}, the sequence has {q_len} tokens")
            if int(plan.query_positions.max()) >= q_len:
                raise VRHError(f"query position {int(plan.query_positions.max())} is outside the sequence of "
                               f"{q_len} tokens")
            idx = plan.query_positions.to(device).clamp(min=0)
            sets = (torch.stack([plan.key_sets[n].to(device) for n in self.names], dim=-1).float() if self.names
                    else torch.zeros(batch, q_len, 0, device=device))
            self._on_device[device] = (idx, sets)
        return self._on_device[device]

    def _cached_mask_rows(self, attention_mask, idx: torch.Tensor, kv_len: int, causal: bool):
        """Layers sharing one mask tensor (all full or all sliding layers) share its rows."""
        for mask, was_causal, rows in self._mask_rows:
            if mask is attention_mask and was_causal == causal and (rows is None or rows.device == idx.device):
                return rows
        rows = mask_rows(attention_mask, idx, kv_len, causal)
        self._mask_rows.append((attention_mask, causal, rows))  # holding the mask keeps its id from being reused
        return rows

    def _record(self, layer: int, mass: torch.Tensor, argmax: torch.Tensor | None) -> None:
        if layer in self._seen:
            raise VRHError(f"attention capture saw decoder layer {layer} twice: capture one full forward per "
                           "capture_attention scope (no generate, no KV cache)")
        if self._mass is None:
            b, h, q, k = mass.shape
            self._mass = torch.zeros(b, self.geometry.layers, h, q, k, dtype=torch.float32, device=mass.device)
            if argmax is not None:
                self._argmax = torch.full((b, self.geometry.layers, h, q), -1, dtype=torch.long, device=mass.device)
        self._mass[:, layer] = mass.to(self._mass.device)
        if argmax is not None and self._argmax is not None:
            self._argmax[:, layer] = argmax.to(self._argmax.device)
        self._seen.add(layer)

    def result(self) -> CaptureResult:
        """The captured reduction; refuses when the forward did not reach every decoder layer."""
        missing = sorted(set(self.geometry.attention_layers) - self._seen)
        if missing:
            raise VRHError(f"attention capture is incomplete: no rows from decoder layers {missing[:8]}"
                           f"{'...' if len(missing) > 8 else ''} (was the forward run inside the scope?)")
        assert self._mass is not None
        rows = self.plan.row_mask.to(self._mass.device)
        valid = rows[:, None, None, :]
        mass = {name: torch.where(valid, self._mass[..., i], 0.0) for i, name in enumerate(self.names)}
        without = [la for la in range(self.geometry.layers) if not self.geometry.has_heads(la)]
        for value in mass.values():  # a hybrid decoder's layers without heads measure nothing: NaN, never a score
            value[:, without] = float("nan")
        argmax = None
        if self._argmax is not None:
            argmax = torch.where(valid, self._argmax, -1)
        return CaptureResult(mass=mass, argmax=argmax, row_mask=rows)


def _eager_function(module: nn.Module) -> Callable:
    """The model's own eager attention (it carries family details such as soft-capping)."""
    mod = importlib.import_module(type(module).__module__)
    fn = getattr(mod, "eager_attention_forward", None)
    if fn is None:
        raise VRHError(f"{type(module).__name__} has no module-level eager_attention_forward to run under capture")
    return fn


def _capture_layer(handle: CaptureHandle, layer: int, module: nn.Module, query: torch.Tensor, key: torch.Tensor,
                   attention_mask: torch.Tensor | None, kwargs: dict) -> None:
    b, _, q_len, d = query.shape
    kv_len = key.shape[2]
    if kv_len != q_len:
        raise VRHError(f"attention capture needs a full forward without a KV cache (layer {layer}: {q_len} queries, "
                       f"{kv_len} keys)")
    if kwargs.get("position_bias") is not None or kwargs.get("s_aux") is not None:
        raise VRHError("attention capture does not support position biases or attention sinks")
    idx, sets = handle._prepared(query.device, q_len, b)
    scaling = kwargs.get("scaling")
    scaling = d**-0.5 if scaling is None else scaling
    is_causal = kwargs.get("is_causal")
    is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    # A missing mask means what the base function makes of it: sdpa runs `is_causal`, eager adds nothing.
    causal_if_none = handle.base == "sdpa" and bool(is_causal) and q_len > 1
    with torch.no_grad():
        add = handle._cached_mask_rows(attention_mask, idx, kv_len, causal_if_none)
        probs = row_probs(query, key, idx, scaling, kwargs.get("softcap"), add)
        stats = reduce_rows(probs, sets, handle.plan.argmax)
    handle._record(layer, stats.mass, stats.argmax)


class AttentionEdit(Protocol):
    """An intervention on one decoder layer's attention, run inside the registered function (steering, uniform
    ablation: vrh_lmms.runs.interventions). `edit_mask` may return another (additive float) mask for the layer's call;
    `edit_output` may replace rows of the layer's output (batch, q, heads, head_dim)."""

    def edit_mask(self, layer: int, module: nn.Module, query: torch.Tensor, key: torch.Tensor,
                  attention_mask: torch.Tensor | None, kwargs: dict, base: str) -> torch.Tensor | None: ...

    def edit_output(self, layer: int, module: nn.Module, query: torch.Tensor, key: torch.Tensor,
                    value: torch.Tensor, attention_mask: torch.Tensor | None, kwargs: dict, base: str,
                    output: torch.Tensor) -> torch.Tensor: ...


class _CaptureRows:
    """A capture session as an attn_rows hook: records the layer's plan rows once its output is computed."""

    def __init__(self, handle: CaptureHandle) -> None:
        self.handle = handle

    def observe(self, layer: int, module: nn.Module, query: torch.Tensor, key: torch.Tensor,
                attention_mask: torch.Tensor | None, kwargs: dict) -> None:
        _capture_layer(self.handle, layer, module, query, key, attention_mask, kwargs)


def _is_edit(fn) -> bool:
    return hasattr(fn, "edit_mask") or hasattr(fn, "edit_output")


def _layers_with(decoder, test: Callable) -> list[int]:
    """Layers whose attn_rows site carries a hook passing `test`."""
    return [i for i, attn in enumerate(decoder.attns)
            if attn is not None and any(test(fn) for _, fn in rows_hooks(attn))]


def _make_function(base: str) -> Callable:
    def capture_function(module, query, key, value, attention_mask, **kwargs):
        # the hooks of this layer's attn_rows site, in installation order: edits (AttentionEdit), observers (capture)
        hooks = rows_hooks(module)
        for layer, fn in hooks:
            if hasattr(fn, "edit_mask"):
                attention_mask = fn.edit_mask(layer, module, query, key, attention_mask, kwargs, base)
        if base == "sdpa":
            out = sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
        else:
            out = _eager_function(module)(module, query, key, value, attention_mask, **kwargs)
        for layer, fn in hooks:
            if hasattr(fn, "edit_output"):
                out = (fn.edit_output(layer, module, query, key, value, attention_mask, kwargs, base, out[0]),
                       *out[1:])
        for layer, fn in hooks:
            if hasattr(fn, "observe"):
                fn.observe(layer, module, query, key, attention_mask, kwargs)
        return out

    capture_function.__name__ = f"vrh_capture_{base}"
    return capture_function


AttentionInterface.register(CAPTURE_IMPL, _make_function("sdpa"))
AttentionMaskInterface.register(CAPTURE_IMPL, sdpa_mask)
AttentionInterface.register(CAPTURE_IMPL_EAGER, _make_function("eager"))
AttentionMaskInterface.register(CAPTURE_IMPL_EAGER, eager_mask)


def text_config_key(config, text_config) -> str | None:
    """Dotted sub-config key under which `set_attn_implementation` reaches the text model ("" = top level), or None
    where the config does not declare the text config among its `sub_configs`."""
    if text_config is config:
        return ""
    for key in getattr(config, "sub_configs", {}) or {}:
        sub = getattr(config, key, None)
        if sub is text_config:
            return key
        if sub is not None and getattr(sub, "sub_configs", None):
            inner = text_config_key(sub, text_config)
            if inner:
                return f"{key}.{inner}"
    return None


def text_attention_target(model: nn.Module, text_config) -> tuple[nn.Module, str]:
    """(module, key) such that `module.set_attn_implementation(_nested(key, name))` switches the text model only.

    Composite transformers models declare the text config as a sub-config of the top-level config. Remote-code
    models often do not: the published InternVLChatConfig keeps `llm_config` as a plain attribute with no
    `sub_configs`, and `set_attn_implementation` on the top model cannot address it (it would hand the text model
    the top-level implementation). There the switch goes to the submodel whose config is the text config
    (InternVLChatModel.language_model, built as `Qwen2ForCausalLM(config.llm_config)`)."""
    key = text_config_key(model.config, text_config)
    if key is not None:
        return model, key
    for module in model.modules():
        if module is not model and isinstance(module, PreTrainedModel) and module.config is text_config:
            return module, ""
    raise VRHError(f"cannot find the text model of {type(model).__name__}: its text config is neither among the "
                   f"sub-configs of {type(model.config).__name__} nor the config of one of its submodels")


def _nested(key: str, value: str) -> dict | str:
    """{"a.b": v} as set_attn_implementation wants it: {"a": {"b": v}}; "" -> {"": v}."""
    if not key:
        return {"": value}
    out: dict | str = value
    for part in reversed(key.split(".")):
        out = {part: out}
    return out


def choose_base(previous: str | None, text_config) -> str:
    """sdpa for the output, unless the text model runs eager (soft-capping, or eager chosen by the user).

    When the text model already runs one of our registered names (a capture inside a steering scope), its base."""
    for base, name in BASES.items():
        if previous == name:
            return base
    if previous == "eager" or getattr(text_config, "attn_logit_softcapping", None) is not None:
        return "eager"
    return "sdpa"


class TextAttentionSwitch:
    """Switches only the text stack of `model` to the registered function of `base` (see `choose_base`) and back.

    Used by capture (one scope) and by the interventions (a scope, or for as long as an ablation is applied)."""

    def __init__(self, model: nn.Module, base: str | None = None) -> None:
        self.model = unwrap(model)
        self.decoder = locate_decoder(self.model)
        self.target, self.key = text_attention_target(self.model, self.decoder.text_config)
        self.previous: str | None = None
        self.base = base
        self.active = False

    def on(self) -> str:
        """Switch; returns the base ("sdpa" or "eager") whose output the registered function reproduces."""
        if self.active:
            return self.base  # type: ignore[return-value]
        self.previous = self.decoder.text_config._attn_implementation
        self.base = self.base or choose_base(self.previous, self.decoder.text_config)
        if self.base not in BASES:
            raise VRHError(f"unknown capture base {self.base!r}; use one of {', '.join(BASES)}")
        self.target.set_attn_implementation(_nested(self.key, BASES[self.base]))
        if self.decoder.text_config._attn_implementation != BASES[self.base]:
            # transformers only warns when a model's attention does not dispatch through AttentionInterface
            self.target.set_attn_implementation(_nested(self.key, self.previous))
            raise VRHError(f"{type(self.target).__name__} did not switch its text attention to {BASES[self.base]!r}: "
                           "its attention classes do not run through transformers' AttentionInterface (remote code "
                           "with its own attention, e.g. InternLM2); attention capture and attention interventions "
                           "need a text model that does")
        self.active = True
        return self.base

    def off(self) -> None:
        if self.active:
            self.target.set_attn_implementation(_nested(self.key, self.previous))
            self.active = False


def install_attention_edits(model: nn.Module, edits: dict[int, AttentionEdit], base: str | None = None,
                            ) -> tuple[str, Callable[[], None]]:
    """Decoder layer i's attention runs `edits[i]` (through the registered function) until the returned `remove()`
    is called; returns (base, remove). Refuses a layer that already carries an edit (no nested interventions)."""
    switch = TextAttentionSwitch(model, base)
    decoder = switch.decoder
    attns = decoder.attns
    bad = [i for i in edits if not 0 <= i < len(attns)]
    if bad:
        raise VRHError(f"attention intervention on layer {bad[0]}, but the decoder has layers 0-{len(attns) - 1}")
    without = [i for i in edits if attns[i] is None]
    if without:
        raise VRHError(f"attention intervention on layer {without[0]}, which has no attention heads (a "
                       f"linear-attention layer); heads exist in {layer_ranges(decoder.geometry.attention_layers)}")
    busy = [i for i in edits if i in _layers_with(decoder, _is_edit)]
    if busy:
        raise VRHError(f"decoder layers {busy[:8]} already carry an attention intervention; nested steering or "
                       "uniform ablation is not supported")
    installed = decoder.install([Hook(site_name(i, ATTN_ROWS), edit, "rows") for i, edit in edits.items()])

    def remove() -> None:
        installed.remove()
        switch.off()

    try:
        return switch.on(), remove
    except BaseException:
        remove()
        raise


@contextmanager
def attention_edits(model: nn.Module, edits: dict[int, AttentionEdit], base: str | None = None) -> Iterator[str]:
    """Scoped `install_attention_edits`: yields the base; everything is undone on exit, also on exceptions."""
    used, remove = install_attention_edits(model, edits, base)
    try:
        yield used
    finally:
        remove()


@contextmanager
def capture_attention(model: nn.Module, plan: CapturePlan, base: str | None = None) -> Iterator[CaptureHandle]:
    """Within the scope, one forward of `model` records `plan`'s rows; `handle.result()` afterwards.

    base: "sdpa" or "eager" for the layer output (default: what the text model ran before, see `choose_base`).
    """
    switch = TextAttentionSwitch(model, base)
    dec = switch.decoder
    if _layers_with(dec, lambda fn: isinstance(fn, _CaptureRows)):
        raise VRHError("this model is already inside capture_attention; nested captures are not supported")
    if base is not None and base not in BASES:
        raise VRHError(f"unknown capture base {base!r}; use one of {', '.join(BASES)}")
    handle = CaptureHandle(plan=plan, geometry=dec.geometry, base="")
    session = _CaptureRows(handle)
    installed = dec.install([Hook(site_name(i, ATTN_ROWS), session, "rows") for i in dec.geometry.attention_layers])
    try:
        handle.base = switch.on()
        yield handle
    finally:
        installed.remove()
        handle._mask_rows.clear()
        handle._on_device.clear()
        switch.off()
