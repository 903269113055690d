"""A packed prefill computes what its configurations share once: rows of one doc agree until their heads differ.

In a packed batch (vrh_lmms.model.packing) every doc's prompt is copied once per configuration, and copy k ablates
configuration k's heads. Two copies of one doc carry bit-identical hidden states into layer L as long as their
configurations ablate the same heads (in the same mode) below L: everything before is the same arithmetic on the
same numbers. So during the prefill, layer L runs on one representative row per (doc, heads ablated up to and
including L) and its output is copied to the rest of the group; inside the layer, the attention (norm, q/k/v, the
attention itself) runs on one row per (doc, heads ablated below L), and the o_proj edit (`RowAblator`) spreads that
row to the configurations that ablate a head at L. Keys and values reach the KV cache for every row, copied from
their representative, so decoding continues on the full batch as before.

k heads drawn at random miss layer 0 with probability about (1 - 1/layers)^k (0.48 for 20 heads of a 28-layer 7B
model) and a model's top retrieval heads sit in its middle layers, so the lower layers run once per doc instead of
once per configuration (on the demo model, whose live heads sit in layers 0-2, this saves little). The rows
computed are the same numbers the full batch computes (tested bit for bit in float32). An argument the wrappers
cannot place on the batch axis runs that layer on the full batch; a hook on a layer, an attention or an o_proj (it
would see the shared rows), or an attention edit, turns sharing off for the call. A hybrid decoder (Qwen3.5's
linear-attention layers keep a recurrent state in the cache) is never shared: its packed prefill runs whole.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model.ablation import RowAblator, RowConfig
from vrh_lmms.model.backbone import Decoder, installed_rows_hooks, replace_forward

# the KV cache's argument name across transformers versions: handed on as a `_RowsCache` of the computed rows
_CACHE_NAMES = ("cache", "past_key_values", "past_key_value")


class _Unshareable(Exception):
    """An argument whose batch axis the wrappers cannot tell: run this forward on the full batch."""


@dataclass(frozen=True)
class _Groups:
    """One level of sharing: which rows run (`take`, indices into the rows the level receives) and, for each of
    those rows, which computed row holds its value (`spread`)."""

    take: torch.Tensor
    spread: torch.Tensor

    @property
    def trivial(self) -> bool:
        return len(self.take) == len(self.spread)


def _groups(keys: Sequence[Any]) -> _Groups:
    """Rows with equal keys share one computed row: the first row of each key."""
    first: dict[Any, int] = {}
    take: list[int] = []
    spread: list[int] = []
    for r, key in enumerate(keys):
        if key not in first:
            first[key] = len(take)
            take.append(r)
        spread.append(first[key])
    return _Groups(torch.tensor(take), torch.tensor(spread))


def heads_below(config: RowConfig, layer: int) -> tuple:
    """What decides a row's hidden state entering `layer`: the heads its configuration ablates below it (and how)."""
    below = tuple(sorted((h.layer, h.head) for h in config.heads if h.layer < layer))
    return (config.mode, below) if below else ()


@dataclass(frozen=True)
class PrefillPlan:
    """Per layer: the rows the layer runs on (groups by doc and heads up to L), and within those, the rows its
    attention runs on (groups by doc and heads below L)."""

    rows: int
    layer: list[_Groups]
    attention: list[_Groups]

    @classmethod
    def build(cls, configs: Sequence[RowConfig], row_configs: Sequence[int], rows_per_doc: int,
              layers: int) -> PrefillPlan:
        doc = [r // rows_per_doc for r in range(len(row_configs))]
        per_layer, per_attention = [], []
        for layer in range(layers):
            out_keys = [(doc[r], heads_below(configs[c], layer + 1)) for r, c in enumerate(row_configs)]
            outer = _groups(out_keys)
            reps = outer.take.tolist()
            in_keys = [(doc[r], heads_below(configs[row_configs[r]], layer)) for r in reps]
            per_layer.append(outer)
            per_attention.append(_groups(in_keys))
        return cls(len(row_configs), per_layer, per_attention)

    def computed_rows(self) -> tuple[int, int]:
        """(attention rows, layer rows) summed over layers: what the prefill computes instead of rows x layers."""
        return (sum(len(g.take) for g in self.attention), sum(len(g.take) for g in self.layer))


def _take(value: torch.Tensor, index: torch.Tensor, axis: int) -> torch.Tensor:
    return value.index_select(axis, index.to(value.device))


def _rows_arg(name: str, value: Any, rows: int, index: torch.Tensor) -> Any:
    """`value` (a layer or attention argument) restricted to the rows `index`; _Unshareable when its batch axis
    cannot be told."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple) and name == "position_embeddings":
        return tuple(_rows_arg("position_part", v, rows, index) for v in value)
    if not isinstance(value, torch.Tensor):
        if isinstance(value, (list, tuple, dict)):
            raise _Unshareable(name)
        return value
    if name == "cache_position" or value.dim() == 0:
        return value
    if name in ("hidden_states", "attention_mask") and value.dim() >= 2:
        if value.shape[0] == rows:
            return _take(value, index, 0)
        if value.shape[0] == 1:
            return value
    if name in ("position_ids", "position_part", "position_embeddings") and value.dim() >= 2:
        # (rows, seq[, dim]) or, for multimodal rotary positions, (sections, rows, seq[, dim]); position_embeddings
        # as one tensor: Llama 4's complex rotary factors (rows, seq, dim / 2)
        mrope = value.dim() == (3 if name == "position_ids" else 4)
        axis = 1 if mrope else 0
        if value.shape[axis] == rows:
            return _take(value, index, axis)
        if value.shape[axis] == 1:
            return value
    raise _Unshareable(name)


class _RowsCache:
    """The KV cache as a layer running on some rows sees it: `update` spreads the computed rows' keys and values to
    every row of the real cache and hands back the computed rows' view of it."""

    def __init__(self, cache: Any, groups: _Groups) -> None:
        self._vrh_cache, self._vrh_groups = cache, groups

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        g = self._vrh_groups
        out = self._vrh_cache.update(_take(key_states, g.spread, 0), _take(value_states, g.spread, 0), *args,
                                     **kwargs)
        return tuple(_take(t, g.take, 0) for t in out)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._vrh_cache, name)


def _on_rows(groups: _Groups, rows: int, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
    """The arguments of a call on a batch of `rows`, restricted to the rows `groups.take` (hidden states first);
    _Unshareable, before anything has run, when some argument's batch axis cannot be told."""
    if not args:
        raise _Unshareable("hidden_states")
    new_args = (_rows_arg("hidden_states", args[0], rows, groups.take),
                *(_rows_arg(f"arg{i}", a, rows, groups.take) for i, a in enumerate(args[1:], 1)))
    new_kwargs = {}
    for name, value in kwargs.items():
        if name in _CACHE_NAMES:
            new_kwargs[name] = None if value is None else _RowsCache(value, groups)
        else:
            new_kwargs[name] = _rows_arg(name, value, rows, groups.take)
    return new_args, new_kwargs


def _spread_output(out: Any, groups: _Groups, computed: int) -> Any:
    """A layer's output on the computed rows, spread back to every row."""
    if isinstance(out, torch.Tensor) and out.dim() > 0 and out.shape[0] == computed:
        return _take(out, groups.spread, 0)
    if isinstance(out, tuple) and out and isinstance(out[0], torch.Tensor):
        return (_spread_output(out[0], groups, computed),
                *(o if not isinstance(o, torch.Tensor) else _spread_output(o, groups, computed) for o in out[1:]))
    # the layer has run (and filled the KV cache): too late to fall back
    raise VRHError(f"shared prefill: a decoder layer returned {type(out).__name__} "
                   f"{tuple(getattr(out, 'shape', ()))}, not {computed} rows; run with --pack 1")


class SharedPrefill:
    """Shares the packed prefill's identical rows (see the module docstring) for the forwards after `arm`."""

    def __init__(self, decoder: Decoder, ablator: RowAblator) -> None:
        self.decoder, self.ablator = decoder, ablator
        self._plan: PrefillPlan | None = None
        self._inner: tuple[PrefillPlan, int] | None = None  # the layer whose attention runs next
        self._undo: list[Callable[[], None]] = []
        self.shared_layers = 0  # layer forwards that ran on fewer rows than the batch (a count for tests)
        self.unshared_layers = 0  # armed layer forwards that fell back to the full batch

    def install(self) -> SharedPrefill:
        self.uninstall()
        if self.decoder.geometry.head_layers is not None:
            return self  # a hybrid decoder: never shared (see `arm`)
        for layer, (module, attn) in enumerate(zip(self.decoder.layers, self.decoder.attns)):
            self._undo.append(replace_forward(module, self._layer_forward(layer)))
            self._undo.append(replace_forward(attn, self._attention_forward(layer)))
        return self

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()
        self._plan = None

    def arm(self, row_configs: Sequence[int], rows_per_doc: int) -> None:
        """The next prefill (a forward of len(row_configs) rows and more than one position) shares; decoding
        steps after it run on the full batch."""
        # a hybrid decoder's linear-attention layers carry a recurrent state in the cache that the shared rows'
        # cache wrapper does not copy to the other rows: its prefill runs on the full batch (exact, not shared)
        if not self.decoder.layers or self.decoder.geometry.head_layers is not None or installed_rows_hooks() \
                or self._hooked():
            self._plan = None
            return
        self._plan = PrefillPlan.build(self.ablator.configs, row_configs, rows_per_doc, len(self.decoder.layers))

    def _hooked(self) -> bool:
        """Whether some hook watches a layer, an attention or an o_proj: it would see the shared rows, not the batch
        (our own o_proj edits are forward replacements, not hooks)."""
        modules = [m for m in (*self.decoder.layers, *self.decoder.attns, *self.decoder.out_projs) if m is not None]
        return any(getattr(m, "_forward_hooks", None) or getattr(m, "_forward_pre_hooks", None) for m in modules)

    def disarm(self) -> None:
        self._plan = None

    def _active(self, args: tuple) -> PrefillPlan | None:
        plan = self._plan
        if plan is None or not args or not isinstance(args[0], torch.Tensor):
            return None
        hidden = args[0]
        if hidden.dim() != 3 or hidden.shape[0] != plan.rows or hidden.shape[1] < 2:
            return None
        return plan

    def _layer_forward(self, layer: int):
        def forward(previous: Callable, *args, **kwargs):
            plan = self._active(args)
            if plan is None:
                return previous(*args, **kwargs)
            if layer == len(plan.layer) - 1:
                self._plan = None  # the prefill's last layer: the decoding steps run on the full batch
            groups = plan.layer[layer]
            if groups.trivial and plan.attention[layer].trivial:
                return previous(*args, **kwargs)
            try:
                call_args, call_kwargs = _on_rows(groups, plan.rows, args, kwargs)
            except _Unshareable:
                self.unshared_layers += 1
                return previous(*args, **kwargs)
            saved = self.ablator.row_layout()
            self.ablator.set_rows([saved[r] for r in groups.take.tolist()])
            self._inner = (plan, layer)
            try:
                out = previous(*call_args, **call_kwargs)
            finally:
                self.ablator.set_rows(saved)
                self._inner = None
            self.shared_layers += 1
            return _spread_output(out, groups, len(groups.take))

        return forward

    def _attention_forward(self, layer: int):
        def forward(previous: Callable, *args, **kwargs):
            inner, self._inner = self._inner, None  # the attention of this layer's call only, once
            if inner is None or inner[1] != layer:
                return previous(*args, **kwargs)
            plan, _ = inner
            outer, groups = plan.layer[layer], plan.attention[layer]
            if groups.trivial:
                return previous(*args, **kwargs)
            if args or "hidden_states" not in kwargs:
                call = (args, kwargs)
            else:  # the attention is called by keyword in most families
                rest = dict(kwargs)
                call = ((rest.pop("hidden_states"),), rest)
            try:
                call_args, call_kwargs = _on_rows(groups, len(outer.take), *call)
            except _Unshareable:
                return previous(*args, **kwargs)
            self.ablator.spread_next(layer, groups.spread)
            try:
                out = previous(*call_args, **call_kwargs)
            finally:
                unspent = self.ablator.spread_next(layer, None)
            first = out[0] if isinstance(out, tuple) and out else out
            if unspent is not None or not isinstance(first, torch.Tensor) or first.shape[0] != len(outer.take):
                raise VRHError(f"shared prefill: layer {layer}'s attention did not reach its output projection "
                               "the way this family was checked to; run with --pack 1")
            return out

        return forward

