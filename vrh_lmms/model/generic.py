"""Any Hugging Face image-text-to-text model's language decoder, found without a family record.

`survey(model)` walks the loaded (or meta-device) model: the text config (`config.get_text_config(decoder=True)`)
says how many decoder layers there are and how many heads each has; the decoder's layer list is the module list of
that length outside the vision / audio towers; each layer's attention is its `self_attn` (or `attention`, `attn`,
...) and the attention's output projection its `o_proj` (or `out_proj`, `dense`, `wo`, ...), whose input width
must equal heads x head_dim of that layer. A hybrid decoder's layers without softmax attention (Gated-DeltaNet,
short convolutions: no attention module, or a `layer_types` kind that names them linear) have no heads: the
geometry lists the layers that have them (`head_layers`), and the head width and KV-head count of each layer where
they vary (Gemma 4's global layers). Anything else (an encoder-decoder, an image read through cross-attention
layers, a fused or compressed output) is a `refusal`: one line naming why. `survey_checkpoint(pretrained)` does
the same from config.json alone, on the meta device, so a refusal comes before any weight loads.

Heads keep the index of their decoder layer in the model: `L3H0` is head 0 of decoder layer 3.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.families import FAMILIES, Family
from vrh_lmms.base.heads.geometry import Geometry

# attribute names of a decoder layer's self-attention and of its output projection, tried in order
ATTN_ATTRS = ("self_attn", "self_attention", "attention", "attn")
OUT_ATTRS = ("o_proj", "out_proj", "dense", "wo", "c_proj", "o_dense", "proj")
# module paths that are never the language decoder
_NOT_TEXT = ("vision", "visual", "qformer", "audio", "sam_", "image", "projector", "speech", "encoder.")
# config keys, tried in order
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "decoder_layers")
_HEAD_KEYS = ("num_attention_heads", "n_head", "num_heads", "decoder_attention_heads")
_KV_KEYS = ("num_key_value_heads", "num_kv_heads", "multi_query_group_num")


def _int_attr(obj: Any, keys: tuple[str, ...]) -> int | None:
    for key in keys:
        try:
            value = getattr(obj, key, None)
        except Exception:  # noqa: BLE001 - per-layer configs raise for an attribute that differs by layer
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def text_config(config: Any) -> Any:
    """The language decoder's config (the config itself for a text-only model)."""
    getter = getattr(config, "get_text_config", None)
    return getter(decoder=True) if getter is not None else config


def _text_config_path(config: Any, text: Any) -> str:
    if text is config:
        return ""
    for name in ("text_config", "language_config", "llm_config", "decoder", "text_model_config"):
        if getattr(config, name, None) is text:
            return name
    return ""


@dataclass
class Survey:
    """What a model's language decoder allows: where its heads are, or one line saying why they cannot be cut."""

    model_type: str
    class_name: str
    layers_path: str | None = None
    attn_attr: str | None = None
    out_attr: str | None = None
    text_config_path: str = ""
    geometry: Geometry | None = None
    refusal: str | None = None
    # the layers whose heads can be cut (the layers with softmax attention)
    attention_layers: tuple[int, ...] = ()
    # (attention, output projection) per decoder layer; (None, None) for a layer without heads
    modules: list[tuple[nn.Module | None, nn.Module | None]] = field(default_factory=list, repr=False)
    layers: list[nn.Module] = field(default_factory=list, repr=False)
    text: Any = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.refusal is None

    def family(self) -> Family:
        """The registered family that claims this model type, or a record built from what was found (not
        registered: it names the decoder's paths, no layout, box convention or wrapper)."""
        found = next((f for f in FAMILIES.values() if self.model_type in f.model_types), None)
        if found is not None and self.layers_path in found.layer_paths:
            return found
        return Family(f"hf:{self.model_type}", (self.model_type,), (self.layers_path or "",),
                      attn_attrs=(self.attn_attr or "self_attn",), out_attrs=(self.out_attr or "o_proj",),
                      text_config_paths=(self.text_config_path,), hf_class=self.class_name)

def _candidates(model: nn.Module, n: int) -> list[tuple[str, nn.ModuleList]]:
    """Module lists of `n` layers that may be the language decoder's, the most likely first."""
    found = [(name, mod) for name, mod in model.named_modules()
             if isinstance(mod, nn.ModuleList) and len(mod) == n and name]
    text = [(name, mod) for name, mod in found if not any(bad in f"{name}." for bad in _NOT_TEXT)]

    def rank(item: tuple[str, nn.ModuleList]) -> int:
        name = item[0]
        return 0 if ("language_model" in name or "text_model" in name) else 1 if name.endswith("layers") else 2

    return sorted(text, key=rank)


def _attention_of(layer: nn.Module) -> tuple[str, nn.Module, str, nn.Module] | None:
    for attr in ATTN_ATTRS:
        attn = getattr(layer, attr, None)
        if not isinstance(attn, nn.Module):
            continue
        for out in OUT_ATTRS:
            proj = getattr(attn, out, None)
            weight = getattr(proj, "weight", None)
            if isinstance(proj, nn.Module) and isinstance(weight, torch.Tensor) and weight.dim() == 2:
                return attr, attn, out, proj
    return None


def _head_dim(attn: nn.Module, text: Any, heads: int) -> int | None:
    for name in ("v_head_dim", "head_dim"):
        value = getattr(attn, name, None)
        if isinstance(value, int) and value > 0:
            return value
    value = _int_attr(text, ("v_head_dim", "head_dim"))
    if value:
        return value
    hidden = _int_attr(text, ("hidden_size", "d_model", "n_embd"))
    return hidden // heads if hidden and hidden % heads == 0 else None


def _ranges(layers: list[int]) -> str:
    return ", ".join(f"L{i}" for i in layers) if len(layers) <= 12 else \
        f"{', '.join(f'L{i}' for i in layers[:10])}, ... ({len(layers)} layers)"


def survey(model: nn.Module) -> Survey:
    """Find the language decoder of `model` (loaded or on the meta device, unwrapped from DDP / FSDP); see the
    module docstring. vrh_lmms.model.backbone.survey_decoder turns a survey without refusal into a `Decoder`."""
    config = model.config
    model_type = str(getattr(type(config), "model_type", "") or getattr(config, "model_type", ""))
    out = Survey(model_type, type(model).__name__)
    if getattr(config, "is_encoder_decoder", False):
        out.refusal = ("an encoder-decoder: its text decoder reads the image through cross-attention from the "
                       "encoder, not through self-attention over image tokens (the heads vrh-lmms measures)")
        return out
    text = text_config(config)
    out.text, out.text_config_path = text, _text_config_path(config, text)
    n = _int_attr(text, _LAYER_KEYS)
    heads = _int_attr(text, _HEAD_KEYS)
    if n is None or heads is None:
        out.refusal = "its text config states no number of decoder layers or attention heads"
        return out
    for path, layers in _candidates(model, n):
        found = [_attention_of(layer) for layer in layers]
        if any(found):
            break
    else:
        out.refusal = f"no list of {n} decoder layers with a self-attention and an output projection was found"
        return out
    out.layers_path, out.layers = path, list(layers)
    kinds = layer_kinds(text, n)
    for i, f in enumerate(found):
        if f is not None and (linear_kind(kinds[i]) or "linear" in type(f[1]).__name__.lower()):
            found[i] = None  # a linear-attention module under an attention name (GLM-5-Next): no softmax heads
    attention = [i for i, f in enumerate(found) if f is not None]
    out.attention_layers = tuple(attention)
    if not attention:
        out.refusal = "none of its decoder layers has softmax-attention heads"
        return out
    first = found[attention[0]]
    out.attn_attr, out.out_attr = first[0], first[2]
    cross = [i for i, layer in enumerate(layers) if found[i] is None
             and any("cross" in name for name, _ in layer.named_children())]
    if cross:
        out.refusal = (f"its image is read through cross-attention layers ({_ranges(cross)}), not through "
                       "self-attention over image tokens (the heads vrh-lmms measures)")
        return out
    dims, kvs = [], []
    for i in attention:
        _, attn, _, proj = found[i]
        width, d = int(proj.weight.shape[1]), _head_dim(attn, text, heads)
        if d is None or width != heads * d:
            out.refusal = (f"its output projection ({found[i][0]}.{found[i][2]} of L{i}) takes {width} inputs, not "
                           f"{heads} heads x head_dim {d}: a fused or compressed output whose columns are not "
                           "per head")
            return out
        dims.append(d)
        kvs.append(kv_heads_of(attn, text, heads))
    fill = {i: k for i, k in zip(attention, zip(dims, kvs))}
    per_dim = [fill.get(i, (dims[0], kvs[0]))[0] for i in range(n)]
    per_kv = [fill.get(i, (dims[0], kvs[0]))[1] for i in range(n)]
    out.geometry = Geometry(layers=n, heads=heads, kv_heads=kvs[0], head_dim=dims[0],
                            head_layers=tuple(attention), layer_head_dims=tuple(per_dim), layer_kv_heads=tuple(per_kv))
    out.modules = [(None, None) if f is None else (f[1], f[3]) for f in found]
    return out


# layer kinds (a config's `layer_types`) whose layers have no softmax heads: linear attention, convolutions, SSMs
_LINEAR_KINDS = ("linear", "conv", "mamba", "ssm", "recurrent", "delta", "rwkv", "lightning")


def linear_kind(kind: str) -> bool:
    return any(word in kind.lower() for word in _LINEAR_KINDS)


def layer_kinds(text: Any, n: int) -> list[str]:
    """The config's kind of each decoder layer (`layer_types`), "" where it names none."""
    kinds = getattr(text, "layer_types", None)
    return [str(k) for k in kinds] if isinstance(kinds, (list, tuple)) and len(kinds) == n else [""] * n


def kv_heads_of(attn: nn.Module, text: Any, heads: int) -> int:
    """KV heads of one attention layer: the module's own count (Gemma 4's global layers have their own), else its
    query-group size, else the config's."""
    groups = _int_attr(attn, ("num_key_value_groups",))
    own = _int_attr(attn, ("num_key_value_heads", "num_kv_heads")) or (
        heads // groups if groups and heads % groups == 0 else None)
    return own or _int_attr(text, _KV_KEYS) or heads


def model_class_for(config: Any) -> type:
    """The transformers class `AutoModelForImageTextToText` (else `AutoModelForCausalLM`) maps this config to,
    looked up by config class (the mappings are keyed by config classes, not model_type strings)."""
    for auto in (AutoModelForImageTextToText, AutoModelForCausalLM):
        mapping = auto._model_mapping
        if type(config) in mapping:
            return mapping[type(config)]
    raise VRHError(f"model_type {getattr(config, 'model_type', None)!r}: transformers maps it to no image-text-to-text "
                   "or causal-LM class")


def meta_model(config: Any) -> nn.Module:
    """The model of `config` on the meta device: every module and shape, no weights, no memory."""
    cls = model_class_for(config)
    with torch.device("meta"):
        return cls._from_config(config)


def survey_checkpoint(pretrained: str, trust_remote_code: bool = False) -> Survey:
    """`survey` from config.json alone (meta device): the refusal or geometry before any weight loads."""
    config = AutoConfig.from_pretrained(pretrained, trust_remote_code=trust_remote_code)
    return survey(meta_model(config))
