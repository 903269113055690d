"""The one table of model families: where each keeps its language decoder, and which conventions it follows.

Every family-specific fact the core needs lives here, not in scattered special cases. Paths are dotted attribute
paths from the loaded top-level model (what `from_pretrained` returns). The decoder is always found through its
layer list, never by searching for the name `o_proj`: vision and audio towers have `o_proj` too.
"""

from __future__ import annotations

from dataclasses import dataclass

from vrh_lmms.errors import VRHError


@dataclass(frozen=True)
class Family:
    name: str
    # config.model_type values (top-level config) that identify the family
    model_types: tuple[str, ...]
    # candidate dotted paths to the decoder's layer list, tried in order
    layer_paths: tuple[str, ...]
    # attribute names of a layer's attention module and of its output projection, tried in order
    attn_attrs: tuple[str, ...] = ("self_attn",)
    out_attrs: tuple[str, ...] = ("o_proj",)
    # dotted paths from the top-level config to the text config, tried in order ("" = the config itself)
    text_config_paths: tuple[str, ...] = ("text_config", "")
    # box output convention (vrh_lmms.boxes) and image-token layout (vrh_lmms.capture.layouts)
    box_convention: str = "generic"
    layout: str | None = None
    # inputs the model's forward needs but its generate builds itself, filled in for a teacher-forced forward
    # (vrh_lmms.discovery.collector.FORWARD_FILLS): InternVLChatModel.forward needs `image_flags`, one per tile
    forward_fills: tuple[str, ...] = ()
    # transformers class names, for documentation and tiny factories
    hf_class: str | None = None
    remote_code: bool = False


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("qwen2_5_vl", ("qwen2_5_vl",), ("model.language_model.layers",), box_convention="qwen2_5_vl",
               layout="qwen2_5_vl", hf_class="Qwen2_5_VLForConditionalGeneration"),
        Family("qwen3_vl", ("qwen3_vl", "qwen3_vl_moe"), ("model.language_model.layers",),
               box_convention="qwen3_vl", layout="qwen3_vl", hf_class="Qwen3VLForConditionalGeneration"),
        Family("internvl", ("internvl",), ("model.language_model.layers",), box_convention="internvl",
               layout="internvl", hf_class="InternVLForConditionalGeneration"),
        # InternVL remote code (InternVLChatModel): InternLM2 text uses attention.wo, Qwen2/Llama text o_proj.
        Family("internvl_chat", ("internvl_chat",), ("language_model.model.layers",),
               attn_attrs=("attention", "self_attn"), out_attrs=("wo", "o_proj"),
               text_config_paths=("llm_config", "text_config", ""), box_convention="internvl",
               layout="internvl", forward_fills=("image_flags",), remote_code=True),
        Family("llava_next", ("llava_next",), ("model.language_model.layers",), box_convention="llava_next",
               layout="llava_next", hf_class="LlavaNextForConditionalGeneration"),
        Family("paligemma", ("paligemma",), ("model.language_model.layers",), box_convention="paligemma",
               layout="paligemma", hf_class="PaliGemmaForConditionalGeneration"),
        Family("glm4v", ("glm4v", "glm4v_moe"), ("model.language_model.layers",), box_convention="glm4v",
               layout="glm4v", hf_class="Glm4vForConditionalGeneration"),
        # Idefics3 and SmolVLM share the architecture: the text decoder is `text_model`, not `language_model`.
        Family("idefics3", ("idefics3", "smolvlm"), ("model.text_model.layers",), layout="idefics3",
               hf_class="Idefics3ForConditionalGeneration"),
        # Phi-4 multimodal: decoder layers sit directly under `model`; the audio encoder also has o_proj.
        Family("phi4_multimodal", ("phi4mm", "phi4_multimodal"), ("model.layers",),
               text_config_paths=("text_config", ""), box_convention="phi4_multimodal", layout="phi4_multimodal",
               hf_class="Phi4MultimodalForCausalLM", remote_code=True),
        # DeepSeek-VL2: DeepSeek-MoE text with MLA attention (head width = v_head_dim).
        Family("deepseek_vl2", ("deepseek_vl_v2",), ("language.model.layers",),
               text_config_paths=("language_config", "text_config", ""), box_convention="deepseek_vl2",
               layout="deepseek_vl2", remote_code=True),
        # Magma: Llama-3 text behind `language_model`.
        Family("magma", ("magma",), ("language_model.model.layers", "model.language_model.layers"),
               text_config_paths=("text_config", ""), box_convention="magma", layout="magma", remote_code=True),
    )
}


def family_for_config(config) -> Family:
    """Family of a loaded model's config, by `model_type`."""
    model_type = getattr(config, "model_type", None)
    for fam in FAMILIES.values():
        if model_type in fam.model_types:
            return fam
    known = sorted(t for f in FAMILIES.values() for t in f.model_types)
    raise VRHError(f"model_type {model_type!r} is not a supported family; known model types: {', '.join(known)}")


def get_family(name: str) -> Family:
    if name not in FAMILIES:
        raise VRHError(f"unknown family {name!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]
