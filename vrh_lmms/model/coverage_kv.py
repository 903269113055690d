"""The KV-policy column of the coverage table (vrh_lmms.model.coverage): measured per model type, not derived.

A type reads "yes" only when it is listed here as verified, and the lists are kept honest by the tests: every type of
KV_VERIFIED runs the KV policy (`vrh-lmms kv-cache`, modes mask, compress and compact) on its generic tiny random
checkpoint against an independent reference (one cache-free forward whose answer rows cannot see the dropped image
keys; tests/support/kv_reference.py) in tests/integration/test_hf_coverage.py, driven by text with stand-in image
tokens; every type of KV_FAMILY runs the same check on its family's tiny checkpoint with real images in
tests/integration/test_kvcache.py (as every family does); every type of KV_REFUSED, and every decoder whose geometry
the policy does not model (hybrid, per-layer widths), is checked to still fail. A type in none of them (a new type of
a newer transformers) reads "untested".
"""

from __future__ import annotations

from vrh_lmms.base.heads.geometry import Geometry

YES = "yes"

# checked on the type's generic tiny checkpoint (vrh_lmms.model.tiny.generic), text ids with stand-in image tokens
KV_VERIFIED = frozenset({
    "aria", "cohere2_vision", "cosmos3_edge", "cosmos3_omni", "deepseek_vl", "deepseek_vl_hybrid", "exaone4_5",
    "fast_vlm", "fuyu", "gemma3", "glm46v", "glm4v", "glm4v_moe", "glm_ocr", "glmga", "got_ocr2", "granite_docling",
    "hyperclovax_vision_v2", "idefics2", "idefics3", "internvl", "janus", "kimi_k25", "lfm2_vl", "lighton_ocr",
    "llama4", "llava", "llava_next", "llava_next_video", "llava_onevision", "llava_onevision1_5", "minimax_m3_vl",
    "mistral3", "mistral_large4", "molmo2", "muse_glimmer", "muse_spark", "ovis2", "ovis2_5", "paddleocr_vl",
    "paligemma", "pp_chart2table", "qianfan_ocr", "qwen2_5_vl", "qwen2_vl", "qwen3_vl", "qwen3_vl_moe",
    "shieldgemma2", "smolvlm", "unlimited_ocr", "video_llama_3", "video_llava", "vipllava",
})

# checked on the family's tiny checkpoint only (real images): model type -> family (vrh_lmms.base.families)
KV_FAMILY = {
    "qwen2_5_omni_thinker": "qwen2_5_omni",
}

# verified, but no cache layer of the type is a plain dynamic layer, so compress and compact free no memory (they
# mask, as mode mask does): model type -> its cache layers (measured on its tiny model; the test checks none shrinks)
KV_MASK_ONLY = {
    "idefics2": "sliding-window",
    "mistral_large4": "indexed (sparse attention)",
    "unlimited_ocr": "reference sliding-window",
}

_NO_IMAGE_ID = ("its config names no image placeholder id (image_token_id), which the policy needs to find "
                "the image keys")
_NEEDS_IMAGES = ("untested: its generate needs pixel_values (the Q-Former's image queries), so the text-only check "
                 "cannot drive it")
# measured failures (test_hf_coverage.py checks each still fails): model type -> why, one line
KV_REFUSED = {
    "blip-2": _NEEDS_IMAGES,
    "instructblip": _NEEDS_IMAGES,
    "instructblipvideo": _NEEDS_IMAGES,
    "kosmos-2": _NO_IMAGE_ID,
    "kosmos-2.5": _NO_IMAGE_ID,
    "mistral4": _NO_IMAGE_ID,
    "qwen3_omni_moe_thinker": "untested: its tiny model's text-only generate fails (AttributeError: its thinker "
                              "config has no vision_start_token_id)",
}


UNTESTED = "untested: no KV-policy check of this type against the reference yet"
HYBRID = ("a hybrid decoder: only its attention layers cache keys (the others keep a recurrent state), which the "
          "policy's grid of (layer, KV group) does not model")
PER_LAYER = ("its layers differ in KV heads or head width, which the policy's one grid of (layer, KV group) does not "
             "model")


def kv_cell(model_type: str, geometry: Geometry | None = None) -> str:
    """The KV-policy cell of a type whose heads can be ablated: yes (with a note where only masking applies), or
    why not in one line. Every refusal but UNTESTED is checked to fail by the coverage test."""
    if model_type in KV_VERIFIED or model_type in KV_FAMILY:
        layers = KV_MASK_ONLY.get(model_type)
        return f"{YES} (mask only: its cache layers are {layers}, which do not shrink)" if layers else YES
    if geometry is not None and geometry.head_layers is not None:
        return HYBRID
    if geometry is not None and (geometry.layer_head_dims is not None or geometry.layer_kv_heads is not None):
        return PER_LAYER
    return KV_REFUSED.get(model_type, UNTESTED)
