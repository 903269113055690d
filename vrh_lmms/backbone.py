"""Find a VLM's language decoder: its attention modules, their output projections and the head geometry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from vrh_lmms.errors import VRHError
from vrh_lmms.families import Family, family_for_config
from vrh_lmms.heads.geometry import Geometry, HeadRef


@dataclass
class Decoder:
    """The language decoder of a loaded model, as ablation and attention capture need it."""

    family: Family
    attns: list[nn.Module]
    out_projs: list[nn.Module]
    geometry: Geometry
    text_config: Any
    layers_path: str


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
    family = family or family_for_config(config)
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
    attns, outs = [], []
    for i, layer in enumerate(layers):
        found = _first_attr(layer, family.attn_attrs)
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
    head_dim = head_dim_of(attns[0], text_config)
    widths = {in_features_of(p) for p in outs}
    if len(widths) != 1:
        raise VRHError(f"{family.name}: output projections differ in width across layers: {sorted(widths)}")
    width = widths.pop()
    if width % head_dim:
        raise VRHError(f"{family.name}: o_proj input width {width} is not a multiple of head_dim {head_dim}")
    heads = width // head_dim
    declared = getattr(text_config, "num_attention_heads", None)
    if isinstance(declared, int) and declared != heads:
        raise VRHError(f"{family.name}: o_proj width {width} / head_dim {head_dim} = {heads} heads, but the config "
                       f"declares {declared}")
    kv = getattr(text_config, "num_key_value_heads", None) or getattr(attns[0], "num_key_value_heads", None) or heads
    geometry = Geometry(layers=len(attns), heads=heads, kv_heads=int(kv), head_dim=head_dim)
    return Decoder(family, attns, outs, geometry, text_config, layers_path)


def dead_heads(decoder: Decoder) -> tuple[HeadRef, ...] | None:
    """Heads whose output projection columns are all exactly zero: whatever they attend to, they write nothing to
    the residual stream (pruned heads, as in the shipped demo model). Read from the weights, so call it before any
    weight-folding ablation. None when some o_proj weight cannot be read as a dense matrix (quantized, offloaded or
    sharded), so the caller knows the check did not run. Real checkpoints have none."""
    import torch

    g = decoder.geometry
    width = g.heads * g.head_dim
    out: list[HeadRef] = []
    for layer, proj in enumerate(decoder.out_projs):
        weight = getattr(proj, "weight", None)
        if (not isinstance(weight, torch.Tensor) or weight.dim() != 2 or weight.shape[1] != width
                or not weight.dtype.is_floating_point or weight.device.type == "meta"):
            return None
        with torch.no_grad():
            written = weight.detach().reshape(weight.shape[0], g.heads, g.head_dim).abs().amax(dim=(0, 2))
        out.extend(HeadRef(layer, int(h)) for h in torch.nonzero(written == 0).flatten().tolist())
    return tuple(out)
