"""Tiny random-weight models of any image-text-to-text class, shrunk generically from the class's default config.

`tiny_config(model_type)` starts from transformers' default config of the type and rewrites its widths and depths,
at every level (text, vision, audio sub-configs), by key name: hidden sizes 64, feed-forward widths 128, 4 attention
heads of width 16 (2 key/value heads where the default shares them), 2 layers per tower; the text decoder keeps
enough layers for each kind of its layers to appear once (Gemma 3's sixth layer is its first global one), its
per-layer lists cut to match; mixture-of-experts and latent-attention (MLA) widths shrink alike. The vocabulary
stays, so the config's special token ids stay valid. `build_tiny_model(model_type)` instantiates the real class
on it in float32 under a seed. No processor is made: the coverage test drives the decoder through text ids
(families with a processor and tokenizer have their own builders, vrh_lmms.model.tiny).
"""

from __future__ import annotations

import copy
import importlib
import inspect
from typing import Any

import torch
from torch import nn
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model.generic import model_class_for
from vrh_lmms.model.tiny.common import seeded

HIDDEN, FFN, HEADS, KV_HEADS, HEAD_DIM, TOWER_LAYERS, MAX_TEXT_LAYERS = 64, 128, 4, 2, 16, 2, 8

_WIDTH_KEYS = {"hidden_size", "d_model", "embed_dim", "hidden_dim", "n_embd", "width", "mm_hidden_size",
               "projector_hidden_size", "out_hidden_size", "vision_hidden_size", "text_hidden_size", "projection_dim",
               "proj_dim", "vision_embed_dim", "text_embed_dim", "output_dim"}
_FFN_KEYS = {"intermediate_size", "ffn_dim", "mlp_dim", "encoder_ffn_dim", "decoder_ffn_dim", "dim_feedforward",
             "n_inner", "shared_expert_intermediate_size", "projector_intermediate_size"}
_MOE_FFN_KEYS = {"moe_intermediate_size", "expert_intermediate_size"}
_LAYER_KEYS = {"num_hidden_layers", "num_layers", "depth", "n_layer", "encoder_layers", "decoder_layers"}
_HEAD_KEYS = {"num_attention_heads", "num_heads", "n_head", "encoder_attention_heads", "decoder_attention_heads"}
_KV_KEYS = {"num_key_value_heads", "num_kv_heads"}
_EXPERT_KEYS = {"num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts"}
_MLA = {"q_lora_rank": 32, "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": HEAD_DIM}
_TEXT_KEYS = ("text_config", "language_config", "llm_config", "text_model_config")
MAX_PARAMS = 160_000_000  # a shrunk model above this kept some width the key names did not reach


def _mrope(sections: list, half: int) -> list:
    """Multimodal RoPE sections (time, height, width) rescaled to sum to the new head_dim / 2."""
    total = sum(sections) or 1
    out = [max(1, round(s * half / total)) for s in sections]
    out[-1] += half - sum(out)
    return out


def _feature_layer(value: Any) -> Any:
    """Vision-feature layer indices (often counted from the first layer of a deep tower) as valid negative ones."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return -1
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return [-1 - (i % TOWER_LAYERS) for i in range(len(value))]
    return value


def _text_layers(layer_types: list | None, n: int) -> int:
    """Fewest layers (at least 2, at most MAX_TEXT_LAYERS) in which every kind of layer of the default appears."""
    if not layer_types:
        return min(n, TOWER_LAYERS)
    seen: set = set()
    need = TOWER_LAYERS
    for i, kind in enumerate(layer_types):
        if kind not in seen:
            seen.add(kind)
            need = max(need, i + 1)
    return min(n, need, MAX_TEXT_LAYERS)


def _shrink(d: dict[str, Any], text: bool) -> dict[str, Any]:
    out = dict(d)
    heads = next((out[k] for k in _HEAD_KEYS if isinstance(out.get(k), int)), None)
    for key, value in d.items():
        if key == "mrope_section" and isinstance(value, list):
            out[key] = _mrope(value, HEAD_DIM // 2)
            continue
        if isinstance(key, str) and "feature_layer" in key or key in ("select_layer", "intermediate_layers_indices"):
            out[key] = _feature_layer(value)
            continue
        if key == "num_kv_shared_layers" and isinstance(value, int):
            out[key] = 0
            continue
        if key == "per_layer_config" and isinstance(value, dict):
            continue  # cut below, once the new layer count is known
        if isinstance(value, dict):
            sub_text = key in _TEXT_KEYS or (key == "decoder" and text)
            out[key] = _shrink(value, sub_text)
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            continue
        if key in _WIDTH_KEYS:
            out[key] = HIDDEN
        elif key in _FFN_KEYS:
            out[key] = FFN
        elif key in _MOE_FFN_KEYS:
            out[key] = FFN // 4
        elif key in _HEAD_KEYS:
            out[key] = HEADS
        elif key in _KV_KEYS:
            out[key] = KV_HEADS if heads and value < heads else HEADS
        elif key in ("head_dim", "global_head_dim", "swa_head_dim"):
            out[key] = HEAD_DIM
        elif key == "hidden_size_per_layer_input":
            out[key] = HEAD_DIM
        elif key in _EXPERT_KEYS:
            out[key] = 4
        elif key == "num_experts_per_tok":
            out[key] = 2
        elif key in _MLA:
            out[key] = _MLA[key]
    if "kv_lora_rank" in out and "head_dim" in out and d.get("head_dim") == d.get("qk_rope_head_dim"):
        out["head_dim"] = out.get("qk_rope_head_dim", HEAD_DIM)  # MLA whose rope reads head_dim as its rotary width
    old = next((d[k] for k in _LAYER_KEYS if isinstance(d.get(k), int) and not isinstance(d.get(k), bool)), None)
    if old:
        new = _text_layers(d.get("layer_types"), old) if text else min(old, TOWER_LAYERS)
        for key in _LAYER_KEYS:
            if isinstance(d.get(key), int) and not isinstance(d.get(key), bool):
                out[key] = new
        for key, value in d.items():  # per-layer lists (layer_types, mlp_only_layers masks, ...) cut to match
            if isinstance(value, list) and len(value) == old and old != new:
                out[key] = value[:new]
        if d.get("sliding_window") is None and "sliding_window" in d and \
                any("sliding" in str(k) for k in d.get("layer_types") or ()):
            out["sliding_window"] = 8  # a default that names sliding layers but leaves the window unset
        if isinstance(d.get("per_layer_config"), dict):  # {layer index: overrides}, only the layers kept
            out["per_layer_config"] = {k: v for k, v in d["per_layer_config"].items() if int(k) < new}
    return out


def tiny_config(model_type: str) -> Any:
    """Transformers' default config of `model_type`, shrunk (module docstring)."""
    if model_type not in CONFIG_MAPPING:
        raise VRHError(f"model_type {model_type!r} is not known to the installed transformers")
    cls = CONFIG_MAPPING[model_type]
    default = cls()
    data = default.to_dict()
    for key in ("transformers_version", "architectures", "_name_or_path"):
        data.pop(key, None)
    top_is_text = not any(isinstance(data.get(k), dict) for k in _TEXT_KEYS) and \
        getattr(default, "get_text_config", lambda **_: default)(decoder=True) is default
    shrunk = _shrink(data, top_is_text)
    config = cls.from_dict(copy.deepcopy(shrunk))
    _default_mrope(config)
    return config


def _reads_mrope(config_cls: type) -> bool:
    """Whether the config declares multimodal-RoPE sections, or its modeling code reads them with a fallback."""
    if "mrope_section" in getattr(config_cls, "ignore_keys_at_rope_validation", ()):
        return True
    try:
        modeling = importlib.import_module(config_cls.__module__.replace(".configuration_", ".modeling_"))
        return '.get("mrope_section"' in inspect.getsource(modeling)
    except (ImportError, OSError, TypeError):
        return False


def _default_mrope(config: Any) -> None:
    """Multimodal-RoPE sections (time, height, width) that fit the tiny rotary width; where the config names none,
    the modeling code's fallback (16, 24, 24) (head_dim 128) is rescaled."""
    subs = [config] + [getattr(config, k) for k in getattr(config, "sub_configs", {}) if getattr(config, k, None)]
    for sub in subs:
        rope = getattr(sub, "rope_parameters", None)
        if isinstance(rope, dict) and ("mrope_section" in rope or _reads_mrope(type(sub))):
            heads = getattr(sub, "num_attention_heads", HEADS)
            head_dim = getattr(sub, "head_dim", None) or getattr(sub, "hidden_size", HIDDEN) // heads
            partial = rope.get("partial_rotary_factor", getattr(sub, "partial_rotary_factor", None)) or 1.0
            rope["mrope_section"] = _mrope(rope.get("mrope_section") or [16, 24, 24], int(head_dim * partial) // 2)


def check_size(model: nn.Module, model_type: str) -> None:
    """Refuse a shrunk model that stayed big (a meta-device model is measured without memory)."""
    params = sum(p.numel() for p in model.parameters())
    if params > MAX_PARAMS:
        raise VRHError(f"its shrunk config still has {params / 1e6:.0f}M parameters (some width is named in a way "
                       "the generic shrinker does not know)")


def build_tiny_model(model_type: str, seed: int = 0) -> nn.Module:
    """The real class of `model_type` on its tiny config, random weights under `seed`, float32, eval mode."""
    config = tiny_config(model_type)
    cls = model_class_for(config)
    with torch.device("meta"):
        check_size(cls._from_config(config), model_type)
    with seeded(seed):
        model = cls._from_config(config, dtype=torch.float32)
    return model.eval()
