"""Find a VLM's language decoder (its attention modules, their output projections, the head geometry) and reach
its heads through named sites.

Every layer L has two sites, named like TransformerLens' hook points:

* ``layers.L.head_out``: the per-head output, i.e. the input of the attention's output projection (o_proj), shape
  (..., heads * head_dim), head h in columns [h*d, (h+1)*d). A hook of kind ``edit`` is ``fn(x) -> x' | None``
  (None: x unchanged, e.g. to record it); a hook of kind ``forward`` is ``fn(x, forward, *args, **kwargs)`` and
  replaces the projection's call (``forward`` is what ran before: call it, or compute the projection yourself
  from ``decoder.out_projs[L]``'s weights, as per-row packing does).
* ``layers.L.attn_rows``: the layer's attention rows, as the registered attention function of
  vrh_lmms.model.capture.attention computes them (kind ``rows``): ``fn`` may have ``edit_mask`` / ``edit_output``
  (interventions) and ``observe`` (capture); the text stack must run that function (`TextAttentionSwitch`).

Hooks are data (`Hook(site, fn, kind)`) passed to one scoped context, ``with decoder.hooks([...]):``, which installs
them in order and removes them in reverse order on exit, also after an exception, leaving every module exactly as
it was; ``decoder.install([...])`` is the same without the scope (for as long as an ablation stays applied). No
module outside this one reaches the projections by attribute: they come from `locate_decoder`. Head ablation's
weight fold (vrh_lmms.model.ablation) edits ``decoder.out_projs`` weights directly: the fast path of the same `HeadSet`
API, exact and restored by its `Ablator`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.families import Family, family_for_config
from vrh_lmms.base.heads.geometry import Geometry, HeadRef, layer_ranges
from vrh_lmms.base.tables import did_you_mean
from vrh_lmms.model.generic import Survey, kv_heads_of, layer_kinds, linear_kind, survey
from vrh_lmms.model.head_view import per_head

HEAD_OUT = "head_out"
ATTN_ROWS = "attn_rows"
SITE_KINDS = {HEAD_OUT: ("edit", "forward"), ATTN_ROWS: ("rows",)}


def site_name(layer: int, site: str) -> str:
    """The name of `site` (HEAD_OUT or ATTN_ROWS) of decoder layer `layer`: "layers.3.head_out"."""
    return f"layers.{int(layer)}.{site}"


@dataclass(frozen=True)
class Hook:
    """A hook as data: the named site it attaches to, the function, and how it is called (see the module doc)."""

    site: str
    fn: Any
    kind: str = "edit"


# attention module -> [(layer, rows hook), ...] in installation order, read by the registered attention function.
# Weak keys: a model that is dropped takes its entries with it (no id() reuse).
_ROWS: weakref.WeakKeyDictionary[nn.Module, list[tuple[int, Any]]] = weakref.WeakKeyDictionary()


def rows_hooks(attn: nn.Module) -> list[tuple[int, Any]]:
    """The attn_rows hooks installed on this attention module: (layer, fn) in installation order."""
    return _ROWS.get(attn, [])


def installed_rows_hooks() -> int:
    """How many attn_rows hooks are installed on any model (0 when every scope has been left)."""
    return sum(len(v) for v in _ROWS.values())


class Installed:
    """Hooks installed by `Decoder.install`; `remove()` takes them out in reverse order (idempotent)."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def remove(self) -> None:
        while self._undo:
            self._undo.pop()()

    def __enter__(self) -> Installed:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


@dataclass
class Decoder:
    """The language decoder of a loaded model, as ablation and attention capture need it, and its named sites."""

    family: Family
    # indexed by the decoder layer's index in the model; None for a layer without heads (a hybrid decoder's
    # linear-attention layers: geometry.attention_layers lists the others)
    attns: list[nn.Module | None]
    out_projs: list[nn.Module | None]
    geometry: Geometry
    text_config: Any
    layers_path: str
    layers: list[nn.Module] = field(default_factory=list)  # the decoder layer modules, in order

    # ------------------------------------------------------------------------------------------ named sites
    def site_names(self) -> list[str]:
        return [site_name(layer, site) for layer in self.geometry.attention_layers for site in SITE_KINDS]

    def parse_site(self, name: str) -> tuple[int, str]:
        """(layer, site) of a site name; a clear error (with the close names) for anything else."""
        parts = str(name).split(".")
        if (len(parts) == 3 and parts[0] == "layers" and parts[1].isdigit() and parts[2] in SITE_KINDS
                and int(parts[1]) < len(self.attns)):
            if self.attns[int(parts[1])] is None:
                raise VRHError(f"no hook site {name!r}: decoder layer {parts[1]} has no attention heads (a "
                               f"linear-attention layer); heads exist in "
                               f"{layer_ranges(self.geometry.attention_layers)}")
            return int(parts[1]), parts[2]
        raise VRHError(f"no hook site {name!r}{did_you_mean(name, self.site_names())}; sites are layers.L.head_out "
                       f"and layers.L.attn_rows for L in {layer_ranges(self.geometry.attention_layers)}")

    def _check(self, hook: Hook) -> tuple[int, str]:
        layer, site = self.parse_site(hook.site)
        if hook.kind not in SITE_KINDS[site]:
            raise VRHError(f"hook kind {hook.kind!r} does not fit site {hook.site!r}; use "
                           f"{' or '.join(SITE_KINDS[site])}")
        return layer, site

    def install(self, hooks: Sequence[Hook]) -> Installed:
        """Install `hooks` in order (all checked first, so a bad one installs nothing); `remove()` undoes them."""
        placed = [(hook, *self._check(hook)) for hook in hooks]
        installed = Installed()
        try:
            for hook, layer, site in placed:
                installed._undo.append(self._attach(hook, layer, site))
        except BaseException:
            installed.remove()
            raise
        return installed

    @contextmanager
    def hooks(self, hooks: Sequence[Hook]) -> Iterator[Decoder]:
        """Scoped `install`: every hook is removed on exit, also when the block raises."""
        installed = self.install(hooks)
        try:
            yield self
        finally:
            installed.remove()

    def _attach(self, hook: Hook, layer: int, site: str) -> Callable[[], None]:
        if site == ATTN_ROWS:
            attn = self.attns[layer]
            entry = (layer, hook.fn)
            _ROWS.setdefault(attn, []).append(entry)

            def detach_rows() -> None:
                entries = _ROWS.get(attn, [])
                for i in range(len(entries) - 1, -1, -1):
                    if entries[i] is entry:
                        del entries[i]
                        break
                if not entries:
                    _ROWS.pop(attn, None)

            return detach_rows
        proj = self.out_projs[layer]
        fn = hook.fn
        if hook.kind == "edit":
            def pre_hook(module, args):
                out = fn(args[0])
                return None if out is None else (out, *args[1:])

            return proj.register_forward_pre_hook(pre_hook).remove
        # kind "forward": the call of the projection itself is replaced; what ran before is handed to fn
        return replace_forward(proj, lambda previous, x, *args, **kwargs: fn(x, previous, *args, **kwargs))


def replace_forward(module: nn.Module, fn: Callable[..., Any]) -> Callable[[], None]:
    """`module.forward` becomes ``fn(previous_forward, *args, **kwargs)`` on this instance; returns the undo, which
    puts back exactly what was there (an instance's own forward, or none)."""
    had_own = "forward" in module.__dict__
    previous_own = module.__dict__.get("forward")
    previous = module.forward

    def forward(*args, **kwargs):
        return fn(previous, *args, **kwargs)

    module.forward = forward

    def undo() -> None:
        if had_own:
            module.forward = previous_own
        else:
            module.__dict__.pop("forward", None)

    return undo


def unwrap(model: nn.Module) -> nn.Module:
    """Strip DDP/FSDP-style wrappers (`.module`) so hooks and weight edits reach the real model."""
    while hasattr(model, "module") and isinstance(model.module, nn.Module) and not hasattr(model, "config"):
        model = model.module
    return model


def _get_path(obj: Any, path: str) -> Any:
    for part in path.split("."):
        if not part:
            continue
        obj = getattr(obj, part)
    return obj


def _first_attr(obj: Any, names: tuple[str, ...]) -> tuple[str, Any] | None:
    for name in names:
        if hasattr(obj, name):
            return name, getattr(obj, name)
    return None


def text_config_of(config: Any, family: Family) -> Any:
    for path in family.text_config_paths:
        try:
            cfg = _get_path(config, path)
        except AttributeError:
            continue
        if cfg is not None and (hasattr(cfg, "num_attention_heads") or hasattr(cfg, "hidden_size")):
            return cfg
    return config


def in_features_of(proj: nn.Module) -> int:
    if hasattr(proj, "in_features"):
        return int(proj.in_features)
    weight = getattr(proj, "weight", None)
    if weight is not None and weight.dim() == 2:
        return int(weight.shape[1])
    raise VRHError(f"cannot tell the input width of output projection {type(proj).__name__}")


def head_dim_of(attn: nn.Module, text_config: Any) -> int:
    """Width of one head's output slice: MLA's v_head_dim, else the attention's head_dim, else config."""
    for source in (attn, text_config):
        for name in ("v_head_dim", "head_dim"):
            value = getattr(source, name, None)
            if isinstance(value, int) and value > 0:
                return value
    hidden = getattr(text_config, "hidden_size", None)
    heads = getattr(text_config, "num_attention_heads", None)
    if hidden and heads:
        return int(hidden) // int(heads)
    raise VRHError("cannot determine head_dim: neither the attention module nor the text config states it")


def locate_decoder(model: nn.Module, family: Family | None = None) -> Decoder:
    """Attention modules and output projections of every decoder layer, and the geometry they imply."""
    model = unwrap(model)
    config = getattr(model, "config", None)
    if family is None:
        try:
            family = family_for_config(config)
        except VRHError:  # no family record: any image-text-to-text model's decoder, found generically
            return survey_decoder(survey(model))
    layers = None
    for path in family.layer_paths:
        try:
            layers = _get_path(model, path)
            layers_path = path
            break
        except AttributeError:
            continue
    if layers is None:
        raise VRHError(f"{family.name}: no decoder layer list at {' or '.join(family.layer_paths)} "
                       f"in {type(model).__name__}")
    text_config = text_config_of(config, family)
    kinds = layer_kinds(text_config, len(layers))
    attns: list[nn.Module | None] = []
    outs: list[nn.Module | None] = []
    for i, layer in enumerate(layers):
        found = _first_attr(layer, family.attn_attrs)
        if found is None and linear_kind(kinds[i]):  # a hybrid decoder's linear-attention layer: no heads
            attns.append(None)
            outs.append(None)
            continue
        if found is None:
            raise VRHError(f"{family.name}: decoder layer {i} has no attention module "
                           f"({' or '.join(family.attn_attrs)})")
        attn = found[1]
        proj = _first_attr(attn, family.out_attrs)
        if proj is None:
            raise VRHError(f"{family.name}: attention of layer {i} has no output projection "
                           f"({' or '.join(family.out_attrs)})")
        attns.append(attn)
        outs.append(proj[1])
    with_heads = [i for i, a in enumerate(attns) if a is not None]
    if not with_heads:
        raise VRHError(f"{family.name}: no decoder layer has softmax-attention heads")
    dims: dict[int, int] = {}
    counts: dict[int, int] = {}
    for i in with_heads:
        head_dim = head_dim_of(attns[i], text_config)
        width = in_features_of(outs[i])
        if width % head_dim:
            raise VRHError(f"{family.name}: o_proj input width {width} of layer {i} is not a multiple of head_dim "
                           f"{head_dim}")
        dims[i], counts[i] = head_dim, width // head_dim
    if len(set(counts.values())) != 1:
        raise VRHError(f"{family.name}: output projections differ in head count across layers: "
                       f"{sorted(set(counts.values()))}")
    heads = counts[with_heads[0]]
    declared = getattr(text_config, "num_attention_heads", None)
    if isinstance(declared, int) and declared != heads:
        width = in_features_of(outs[with_heads[0]])
        raise VRHError(f"{family.name}: o_proj width {width} / head_dim {dims[with_heads[0]]} = {heads} heads, but "
                       f"the config declares {declared}")
    first = with_heads[0]
    kvs = {i: kv_heads_of(attns[i], text_config, heads) for i in with_heads}
    geometry = Geometry(layers=len(attns), heads=heads, kv_heads=kvs[first], head_dim=dims[first],
                        head_layers=tuple(with_heads),
                        layer_head_dims=tuple(dims.get(i, dims[first]) for i in range(len(attns))),
                        layer_kv_heads=tuple(kvs.get(i, kvs[first]) for i in range(len(attns))))
    return Decoder(family, attns, outs, geometry, text_config, layers_path, list(layers))


def survey_decoder(found: Survey) -> Decoder:
    """The decoder a generic survey found (vrh_lmms.model.generic: any image-text-to-text model, no family record),
    or its refusal as one line."""
    if not found.ok:
        raise VRHError(f"{found.model_type} ({found.class_name}): its heads cannot be cut: {found.refusal}")
    return Decoder(found.family(), [a for a, _ in found.modules], [o for _, o in found.modules], found.geometry,
                   found.text, found.layers_path, list(found.layers))


def dead_heads(decoder: Decoder) -> tuple[HeadRef, ...] | None:
    """Heads whose output projection columns are all exactly zero: whatever they attend to, they write nothing to
    the residual stream (pruned heads, as in the shipped demo model). Read from the weights, so call it before any
    weight-folding ablation. None when some o_proj weight cannot be read as a dense matrix (quantized, offloaded or
    sharded), so the caller knows the check did not run. Real checkpoints have none."""
    g = decoder.geometry
    out: list[HeadRef] = []
    for layer in g.attention_layers:
        weight = getattr(decoder.out_projs[layer], "weight", None)
        if (not isinstance(weight, torch.Tensor) or weight.dim() != 2 or weight.shape[1] != g.heads * g.dim(layer)
                or not weight.dtype.is_floating_point or weight.device.type == "meta"):
            return None
        with torch.no_grad():
            written = per_head(weight.detach(), g.dim(layer)).abs().amax(dim=(0, 2))
        out.extend(HeadRef(layer, int(h)) for h in torch.nonzero(written == 0).flatten().tolist())
    return tuple(out)
