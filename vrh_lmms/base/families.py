"""The one registry of model families: every family-specific fact lives in its `Family` record.

A record owns the family's lmms-eval wrapper ids (`Wrapper`), its box convention (vrh_lmms.base.boxes), its image-token
layout builder (vrh_lmms.model.capture.tilings), where its language decoder sits (the decoder locator:
vrh_lmms.model.backbone.locate_decoder) and its tiny-checkpoint factory (vrh_lmms.model.tiny). Every other table is a
live view of `FAMILIES`: `model_wrappers.manifests.WRAPPERS`, `boxes.known.CONVENTIONS`, `capture.tilings.BUILDERS`,
`tiny.registry.TINY_FACTORIES`. So adding a model is one `register(Family(...))` plus its wrapper module
(docs/adding-a-model.md).

Paths are dotted attribute paths from the loaded top-level model (what `from_pretrained` returns). The decoder is
always found through its layer list, never by searching for the name `o_proj`: vision and audio towers have
`o_proj` too. This module imports nothing heavy (no torch): lmms-eval's entry point reads the wrappers through it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vrh_lmms.base.boxes import conventions as conv
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.tables import did_you_mean, unknown_name


def resolve_ref(ref: str | Callable) -> Any:
    """A callable given as itself or as "package.module:attribute" (imported only when first needed)."""
    if not isinstance(ref, str):
        return ref
    module, _, attr = ref.partition(":")
    try:
        obj = importlib.import_module(module)
    except ImportError as exc:
        if "transformers" not in str(exc):
            raise
        raise VRHError(f"{module} needs a newer transformers than the installed {_installed('transformers')}: "
                       f"{str(exc).splitlines()[0]}") from None
    return getattr(obj, attr) if attr else obj


def _installed(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "(none)"


@dataclass(frozen=True)
class Wrapper:
    """One lmms-eval model id (`--model vrh_...`) and the classes that implement it.

    module: a module under vrh_lmms.model_wrappers ("qwen2_5_vl"), or a full dotted path for a wrapper that lives
    elsewhere. simple / chat: class names in it (lmms-eval prefers chat unless --force_simple)."""

    model_id: str
    module: str
    simple: str | None = None
    chat: str | None = None

    @property
    def module_path(self) -> str:
        return self.module if "." in self.module else f"vrh_lmms.model_wrappers.{self.module}"


@dataclass(frozen=True)
class Family:
    """Everything vrh-lmms knows about one model family (see the module docstring); registered with `register`."""

    name: str
    # config.model_type values (top-level config) that identify the family
    model_types: tuple[str, ...]
    # decoder locator: candidate dotted paths to the decoder's layer list, tried in order
    layer_paths: tuple[str, ...]
    # attribute names of a layer's attention module and of its output projection, tried in order
    attn_attrs: tuple[str, ...] = ("self_attn",)
    out_attrs: tuple[str, ...] = ("o_proj",)
    # dotted paths from the top-level config to the text config, tried in order ("" = the config itself)
    text_config_paths: tuple[str, ...] = ("text_config", "")
    # the box output convention it speaks (vrh_lmms.base.boxes.conventions)
    convention: conv.Convention = field(default=conv.GENERIC, hash=False)  # hash=False: its params are a dict
    # image-token layout: its name (vrh_lmms.model.capture.layouts, capture extras) and builder, a callable or
    # "module:function" (w, h, extras) -> blocks (vrh_lmms.model.capture.tilings); families may share one layout
    layout: str | None = None
    layout_builder: str | Callable | None = None
    # lmms-eval model ids and their wrapper classes (vrh_lmms.model_wrappers)
    wrappers: tuple[Wrapper, ...] = ()
    # tiny-checkpoint factory: a module with `build(out_dir, seed, **overrides) -> Path`, or that function
    tiny: str | Callable | None = None
    # inputs the model's forward needs but its generate builds itself, filled in for a teacher-forced forward
    # (vrh_lmms.model.capture.teacher_forced.FORWARD_FILLS): InternVLChatModel.forward needs `image_flags`, one per tile
    forward_fills: tuple[str, ...] = ()
    # transformers class names, for documentation and tiny factories
    hf_class: str | None = None
    remote_code: bool = False
    # model args the demo passes to this family's backend for short grounding answers (Qwen3.5: thinking off, else
    # its answer waits behind a `<think>` block longer than the demo's tokens)
    demo_model_args: tuple[tuple[str, str], ...] = ()

    @property
    def box_convention(self) -> str:
        """Name of the family's box convention (what wrappers announce through boxes.context.set_active)."""
        return self.convention.name

    def tiny_factory(self) -> Callable:
        """The tiny factory's `build` function."""
        if self.tiny is None:
            raise VRHError(unknown_name("tiny family", self.name, tiny_names()))
        found = resolve_ref(self.tiny)
        return found.build if hasattr(found, "build") else found


def _tiny(name: str) -> str:
    return f"vrh_lmms.model.tiny.{name}"


FAMILIES: dict[str, Family] = {}  # the registry: family name -> record (fill it through `register`)


def register(family: Family, replace: bool = False) -> Family:
    """Add a family to the registry (its wrappers, convention, layout and tiny factory show up in every derived
    table). Refuses a name, model id or convention name that would mean two things."""
    if family.name in FAMILIES and not replace:
        raise VRHError(f"family {family.name!r} is already registered (pass replace=True to redefine it)")
    others = [f for f in FAMILIES.values() if f.name != family.name]
    ids = {w.model_id: f.name for f in others for w in f.wrappers}
    for w in family.wrappers:
        if w.model_id in ids:
            raise VRHError(f"family {family.name!r}: model id {w.model_id!r} already belongs to family "
                           f"{ids[w.model_id]!r}")
        if not (w.simple or w.chat):
            raise VRHError(f"family {family.name!r}: wrapper {w.model_id!r} names neither a simple nor a chat "
                           "class")
    name = family.convention.name
    clash = [f.name for f in others if f.convention.name == name and f.convention != family.convention]
    if clash or (family.convention.name == conv.GENERIC.name and family.convention != conv.GENERIC):
        raise VRHError(f"family {family.name!r}: box convention {family.convention.name!r} differs from the one of "
                       f"that name already registered; give it its own name")
    layouts = {f.layout: f for f in others if f.layout}
    if family.layout in layouts and layouts[family.layout].layout_builder != family.layout_builder:
        raise VRHError(f"family {family.name!r}: layout {family.layout!r} already has another builder "
                       f"(family {layouts[family.layout].name!r})")
    FAMILIES[family.name] = family
    return family


def unregister(name: str) -> Family:
    """Remove a registered family (tests that register a temporary one)."""
    return FAMILIES.pop(get_family(name).name)


for _fam in (
    Family("qwen2_5_vl", ("qwen2_5_vl",), ("model.language_model.layers",), convention=conv.QWEN2_5_VL,
           layout="qwen2_5_vl", layout_builder="vrh_lmms.model.capture.tilings:merged_patch_grid",
           wrappers=(Wrapper("vrh_qwen25", "qwen2_5_vl", "VRHQwen25", "VRHQwen25Chat"),),
           tiny=_tiny("qwen2_5_vl"), hf_class="Qwen2_5_VLForConditionalGeneration"),
    Family("qwen3_vl", ("qwen3_vl", "qwen3_vl_moe"), ("model.language_model.layers",), convention=conv.QWEN3_VL,
           layout="qwen3_vl", layout_builder="vrh_lmms.model.capture.tilings:merged_patch_grid",
           wrappers=(Wrapper("vrh_qwen3", "qwen3_vl", "VRHQwen3", "VRHQwen3Chat"),),
           tiny=_tiny("qwen3_vl"), hf_class="Qwen3VLForConditionalGeneration"),
    Family("internvl", ("internvl",), ("model.language_model.layers",), convention=conv.INTERNVL,
           layout="internvl", layout_builder="vrh_lmms.model.capture.tilings:internvl_tiles",
           wrappers=(Wrapper("vrh_internvl", "internvl_hf", None, "VRHInternVLChat"),),
           tiny=_tiny("internvl"), hf_class="InternVLForConditionalGeneration"),
    # Qwen2.5-Omni: the thinker's text decoder (its audio and vision towers have o_proj too); Qwen2.5-VL's vision
    # tower and image processor, so its box convention and image layout; audio layout in vrh_lmms.model.capture.audio.
    # The thinker alone (Qwen2_5OmniThinkerForConditionalGeneration, `model.thinker`) is the same family.
    Family("qwen2_5_omni", ("qwen2_5_omni", "qwen2_5_omni_thinker"),
           ("thinker.model.language_model.layers", "model.language_model.layers"),
           text_config_paths=("thinker_config.text_config", "text_config"), convention=conv.QWEN2_5_VL,
           layout="qwen2_5_vl", layout_builder="vrh_lmms.model.capture.tilings:merged_patch_grid",
           wrappers=(Wrapper("vrh_qwen25_omni", "qwen2_5_omni", "VRHQwen25Omni"),),
           tiny=_tiny("qwen2_5_omni"), hf_class="Qwen2_5OmniForConditionalGeneration"),
    # InternVL remote code (InternVLChatModel): InternLM2 text uses attention.wo, Qwen2/Llama text o_proj.
    Family("internvl_chat", ("internvl_chat",), ("language_model.model.layers",),
           attn_attrs=("attention", "self_attn"), out_attrs=("wo", "o_proj"),
           text_config_paths=("llm_config", "text_config", ""), convention=conv.INTERNVL,
           layout="internvl", layout_builder="vrh_lmms.model.capture.tilings:internvl_tiles",
           forward_fills=("image_flags",),
           wrappers=(Wrapper("vrh_internvl3", "internvl_remote", "VRHInternVL3"),
                     Wrapper("vrh_internvl3_5", "internvl_remote", "VRHInternVL3_5"),
                     Wrapper("vrh_internvl2", "internvl_remote", "VRHInternVL2")),
           remote_code=True),
    Family("llava_next", ("llava_next",), ("model.language_model.layers",), convention=conv.LLAVA_NEXT,
           layout="llava_next", layout_builder="vrh_lmms.model.capture.tilings:llava_next_anyres",
           wrappers=(Wrapper("vrh_llava_next", "llava_next", "VRHLlavaNext", "VRHLlavaNextChat"),),
           tiny=_tiny("llava_next"), hf_class="LlavaNextForConditionalGeneration"),
    Family("paligemma", ("paligemma",), ("model.language_model.layers",), convention=conv.PALIGEMMA,
           layout="paligemma", layout_builder="vrh_lmms.model.capture.tilings:square_grid",
           wrappers=(Wrapper("vrh_paligemma", "paligemma", "VRHPaliGemma"),),
           tiny=_tiny("paligemma"), hf_class="PaliGemmaForConditionalGeneration"),
    Family("glm4v", ("glm4v", "glm4v_moe"), ("model.language_model.layers",), convention=conv.GLM4V,
           layout="glm4v", layout_builder="vrh_lmms.model.capture.tilings:merged_patch_grid",
           wrappers=(Wrapper("vrh_glm4v", "glm4v", "VRHGLM4V"),),
           tiny=_tiny("glm4v"), hf_class="Glm4vForConditionalGeneration"),
    # Idefics3 and SmolVLM share the architecture: the text decoder is `text_model`, not `language_model`.
    # Never trained to output boxes: the generic 0-1000 prompt. lmms-eval's idefics2 backend, class corrected.
    Family("idefics3", ("idefics3", "smolvlm"), ("model.text_model.layers",), layout="idefics3",
           layout_builder="vrh_lmms.model.capture.tilings:idefics3_tiles", tiny=_tiny("idefics3"),
           wrappers=(Wrapper("vrh_idefics3", "idefics3", "VRHIdefics3"),
                     Wrapper("vrh_smolvlm", "idefics3", "VRHIdefics3")),
           hf_class="Idefics3ForConditionalGeneration"),
    # Phi-4 multimodal: decoder layers sit directly under `model`; the audio encoder also has o_proj.
    Family("phi4_multimodal", ("phi4mm", "phi4_multimodal"), ("model.layers",),
           text_config_paths=("text_config", ""), convention=conv.PHI4_MULTIMODAL, layout="phi4_multimodal",
           layout_builder="vrh_lmms.model.capture.tilings:phi4_dynamic_hd",
           wrappers=(Wrapper("vrh_phi4", "phi4", "VRHPhi4", "VRHPhi4Chat"),),
           hf_class="Phi4MultimodalForCausalLM", remote_code=True),
    # DeepSeek-VL2: DeepSeek-MoE text with MLA attention (head width = v_head_dim).
    Family("deepseek_vl2", ("deepseek_vl_v2",), ("language.model.layers",),
           text_config_paths=("language_config", "text_config", ""), convention=conv.DEEPSEEK_VL2,
           layout="deepseek_vl2", layout_builder="vrh_lmms.model.capture.tilings:deepseek_vl2_tiles",
           wrappers=(Wrapper("vrh_deepseek_vl2", "deepseek_vl2", "VRHDeepseekVL2"),), remote_code=True),
    # Magma: Llama-3 text behind `language_model`.
    Family("magma", ("magma",), ("language_model.model.layers", "model.language_model.layers"),
           text_config_paths=("text_config", ""), convention=conv.MAGMA, layout="magma",
           layout_builder="vrh_lmms.model.capture.tilings:magma_crops",
           wrappers=(Wrapper("vrh_magma", "magma", "VRHMagma"),), remote_code=True),
    # LLaVA-1.5 (llava-hf): Llama-2 text; one fixed grid on CLIP's centre crop (or the padded square)
    Family("llava", ("llava",), ("model.language_model.layers",), convention=conv.LLAVA, layout="llava",
           layout_builder="vrh_lmms.model.capture.tilings_crops:clip_square",
           wrappers=(Wrapper("vrh_llava", "llava", "VRHLlava", "VRHLlavaChat"),), tiny=_tiny("llava"),
           hf_class="LlavaForConditionalGeneration"),
    # LLaVA-OneVision (llava-hf -ov-hf checkpoints): Qwen2 text; AnyRes with anyres_max_9 pooling
    Family("llava_onevision", ("llava_onevision",), ("model.language_model.layers",), convention=conv.LLAVA_NEXT,
           layout="llava_onevision", layout_builder="vrh_lmms.model.capture.tilings_crops:onevision_anyres",
           wrappers=(Wrapper("vrh_llava_onevision", "llava", "VRHLlavaOneVision", "VRHLlavaOneVisionChat"),),
           tiny=f"{_tiny('llava')}:build_onevision", hf_class="LlavaOnevisionForConditionalGeneration"),
    # Gemma 3: never trained to output boxes (asked with the generic 0-1000 prompt); bidirectional attention inside
    # each image, sliding-window and global text layers; squashed image, then pan-and-scan crops when enabled
    Family("gemma3", ("gemma3",), ("model.language_model.layers",), convention=conv.GENERIC, layout="gemma3",
           layout_builder="vrh_lmms.model.capture.tilings_crops:gemma3_crops",
           wrappers=(Wrapper("vrh_gemma3", "gemma3", "VRHGemma3"),), tiny=_tiny("gemma"),
           hf_class="Gemma3ForConditionalGeneration"),
    # Gemma 4 (E2B, E4B, 26B-A4B, 31B; gemma4_unified: the encoder-free 12B): no documented box format (asked with
    # the generic 0-1000 prompt); one variable-resolution grid per image (aspect kept, 3 x 3 pooled or merged 16 px
    # patches); sliding-window layers (bidirectional inside each image) and global layers with wider heads and fewer
    # KV heads
    Family("gemma4", ("gemma4", "gemma4_unified"), ("model.language_model.layers",), convention=conv.GENERIC,
           layout="gemma4", layout_builder="vrh_lmms.model.capture.tilings_gemma4:gemma4_grid",
           wrappers=(Wrapper("vrh_gemma4", "gemma4", "VRHGemma4"),), tiny=_tiny("gemma4"),
           hf_class="Gemma4ForConditionalGeneration"),
    # Mistral 3 (Mistral-Small-3.1, Ministral 3): Pixtral vision, Mistral text; no documented box format
    Family("mistral3", ("mistral3",), ("model.language_model.layers",), convention=conv.GENERIC, layout="mistral3",
           layout_builder="vrh_lmms.model.capture.tilings_crops:pixtral_rows",
           wrappers=(Wrapper("vrh_mistral3", "mistral3", "VRHMistral3"),), tiny=_tiny("mistral3"),
           hf_class="Mistral3ForConditionalGeneration"),
    # Llama 4 (Scout, Maverick): chunked-attention RoPE layers and global NoPE layers, MoE text; no box format
    Family("llama4", ("llama4",), ("language_model.model.layers",), convention=conv.GENERIC, layout="llama4",
           layout_builder="vrh_lmms.model.capture.tilings_crops:llama4_tiles",
           wrappers=(Wrapper("vrh_llama4", "llama4", "VRHLlama4"),), tiny=_tiny("llama4"),
           hf_class="Llama4ForConditionalGeneration"),
    # Molmo 2: Qwen3-style text; never trained to output boxes, it points (`<points coords=...>`, 0-1000); a global
    # view then overlapping high-resolution crops, both pooled 2 x 2; bidirectional attention among image tokens
    Family("molmo2", ("molmo2",), ("model.language_model.layers",), convention=conv.MOLMO2, layout="molmo2",
           layout_builder="vrh_lmms.model.capture.tilings_molmo2:molmo2_views",
           wrappers=(Wrapper("vrh_molmo2", "molmo2", "VRHMolmo2"),), tiny=_tiny("molmo2"),
           hf_class="Molmo2ForConditionalGeneration"),
    # MiniCPM-V 4.6 / 4.7 (transformers-native): Qwen3.5 text (hybrid: see docs/models.md); `<box>x1 y1 x2 y2</box>`
    # on 0-1000 after `<ref>..</ref>`; the source view, then the slices of the refined image
    Family("minicpmv", ("minicpmv4_6", "minicpmv4_7"), ("model.language_model.layers",), convention=conv.MINICPMV,
           layout="minicpmv", layout_builder="vrh_lmms.model.capture.tilings_minicpmv:minicpmv_slices",
           wrappers=(Wrapper("vrh_minicpmv", "minicpmv", "VRHMiniCPMV"),), tiny=_tiny("minicpmv"),
           hf_class="MiniCPMV4_6ForConditionalGeneration"),
    # Qwen3.5 (dense and MoE): Qwen3-VL's vision tower, processor, 32 px merged cells and 0-1000 `bbox_2d` boxes; a
    # hybrid text decoder (Gated DeltaNet layers without softmax heads, full attention every 4th layer): heads exist
    # in the full-attention layers only, under their decoder layer index
    Family("qwen3_5", ("qwen3_5", "qwen3_5_moe"), ("model.language_model.layers",), convention=conv.QWEN3_VL,
           layout="qwen3_vl", layout_builder="vrh_lmms.model.capture.tilings:merged_patch_grid",
           wrappers=(Wrapper("vrh_qwen3_5", "qwen3_5", "VRHQwen3_5", "VRHQwen3_5Chat"),), tiny=_tiny("qwen3_5"),
           demo_model_args=(("enable_thinking", "False"),),
           hf_class="Qwen3_5ForConditionalGeneration"),
    # LLaVA-OneVision-1.5 (transformers-format `-hf` checkpoints): RICE-ViT vision, Qwen3 text with 1-D RoPE;
    # Qwen2-VL's image processor (28 px merged cells, one frame per patch), so Qwen2.5-VL's layout; no documented box
    # format (asked with the generic 0-1000 prompt)
    Family("llava_onevision1_5", ("llava_onevision1_5",), ("model.language_model.layers",), convention=conv.GENERIC,
           layout="qwen2_5_vl", layout_builder="vrh_lmms.model.capture.tilings:merged_patch_grid",
           wrappers=(Wrapper("vrh_llava_onevision1_5", "llava_onevision1_5", "VRHLlavaOneVision15",
                             "VRHLlavaOneVision15Chat"),),
           tiny=_tiny("llava_onevision1_5"), hf_class="LlavaOnevision15ForConditionalGeneration"),
    # Any HF-native image-text-to-text checkpoint through lmms-eval's generic `huggingface` backend: the decoder is
    # found by vrh_lmms.model.generic, not by these paths; no layout or box convention of its own (docs/models.md).
    Family("hf", (), (), wrappers=(Wrapper("vrh_hf", "hf", None, "VRHHf"),)),
):
    register(_fam)
del _fam


def family_for_config(config) -> Family:
    """Family of a loaded model's config, by `model_type` (the first registered family that claims it).

    The config class's `model_type` is read first: Magma's MagmaConfig copies every attribute of its text config onto
    itself, so a loaded Magma config says "llama" on the instance and "magma" only on the class."""
    model_type = getattr(config, "model_type", None)
    for candidate in (getattr(type(config), "model_type", None), model_type):
        for fam in FAMILIES.values():
            if candidate and candidate in fam.model_types:
                return fam
    known = sorted(t for f in FAMILIES.values() for t in f.model_types)
    raise VRHError(f"model_type {model_type!r} is not a supported family{did_you_mean(str(model_type), known)}; "
                   f"known model types: {', '.join(known)}")


def get_family(name: str) -> Family:
    if name not in FAMILIES:
        raise VRHError(unknown_name("family", name, FAMILIES))
    return FAMILIES[name]


def tiny_names() -> list[str]:
    """Families with a tiny-checkpoint factory."""
    return sorted(f.name for f in FAMILIES.values() if f.tiny is not None)
