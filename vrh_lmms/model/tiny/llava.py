"""Tiny random-weight LLaVA-1.5 (`LlavaForConditionalGeneration`) and LLaVA-OneVision
(`LlavaOnevisionForConditionalGeneration`) checkpoints.

LLaVA-1.5 is modelled on llava-hf/llava-1.5-7b-hf: a CLIP tower read at its penultimate layer (CLS dropped), a
2-layer MLP projector, CLIP's resize-shortest-edge + centre crop (one fixed grid of tokens), Vicuna (Llama-2) text
and llava-hf's `USER: <image>\\n... ASSISTANT:` template. LLaVA-OneVision is modelled on
llava-hf/llava-onevision-qwen2-7b-ov-hf: a SigLIP tower read at its last layer (no CLS), AnyRes over 384 px tiles
with `anyres_max_9` pooling, a learned newline closing every row of the unpadded grid, Qwen2 text and ChatML.
Both use `vrh_lmms.model.tiny.sensitive` so answers change with the image and with the heads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import (
    CLIPImageProcessor,
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaImageProcessor,
    LlavaOnevisionConfig,
    LlavaOnevisionForConditionalGeneration,
    LlavaOnevisionImageProcessor,
    LlavaOnevisionProcessor,
    LlavaOnevisionVideoProcessor,
    LlavaProcessor,
)

from vrh_lmms.model.tiny.common import DEFAULT_TEXT
from vrh_lmms.model.tiny.sensitive import save_sensitive
from vrh_lmms.model.tiny.vocab import build_tokenizer, chatml_tokenizer

PATCH = 14
NEWLINE = "\n"  # a token of both vocabularies (Llama-2's <0x0A>, Qwen2's "Ċ"): keep it one, not whitespace
CLIP_MEAN, CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]

# --- LLaVA-1.5 (Vicuna text) -------------------------------------------------------------------------------------
LLAVA_SPECIALS = ("<s>", "</s>", "<image>", "<pad>")
# llava-hf/llava-1.5-7b-hf chat_template.json (its {% generation %} markers dropped: they only mark training labels)
LLAVA_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] != 'system' %}{{ message['role'].upper() + ': '}}{% endif %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}{{ '<image>\n' }}{% endfor %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}{{ content['text'] + ' '}}"
    "{% endfor %}{% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)
LLAVA_SIDE = 112  # 336 in llava-1.5: resize the shortest edge, centre-crop a square
LLAVA_VISION = {"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64,
                "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": LLAVA_SIDE, "patch_size": PATCH,
                "projection_dim": 32, "hidden_act": "quick_gelu"}


def llava_processor(tokenizer, side: int = LLAVA_SIDE, do_pad: bool = False):
    """llava-1.5-hf's processor at `side` (336 in the published checkpoint): CLIP resize + centre crop, or, with
    `do_pad`, LlavaImageProcessor's pad-to-square (the original LLaVA-1.5 `image_aspect_ratio=pad`)."""
    if do_pad:
        ip = LlavaImageProcessor(size={"height": side, "width": side}, do_pad=True, do_center_crop=False,
                                 image_mean=CLIP_MEAN, image_std=CLIP_STD)
    else:
        ip = CLIPImageProcessor(size={"shortest_edge": side}, crop_size={"height": side, "width": side},
                                image_mean=CLIP_MEAN, image_std=CLIP_STD)
    return LlavaProcessor(image_processor=ip, tokenizer=tokenizer, patch_size=PATCH,
                          vision_feature_select_strategy="default", num_additional_image_tokens=1,
                          chat_template=LLAVA_TEMPLATE)


def build(out_dir: str | Path, seed: int = 0, *, text: dict[str, Any] | None = None,
          vision: dict[str, Any] | None = None, extra_words: tuple[str, ...] = ()) -> Path:
    """Write a complete tiny LLaVA-1.5 checkpoint (config, weights, tokenizer, processor, template)."""
    tok = build_tokenizer(LLAVA_SPECIALS, plain_tokens=(NEWLINE,), extra_words=extra_words,
                          named_specials={"image_token": "<image>"}, bos_token="<s>", eos_token="</s>",
                          pad_token="<pad>", chat_template=LLAVA_TEMPLATE, add_bos_token=True, model_max_length=4096)
    ids = tok.convert_tokens_to_ids
    text_cfg = {**DEFAULT_TEXT, **(text or {}), "model_type": "llama",
                "vocab_size": len(tok), "max_position_embeddings": 4096, "bos_token_id": ids("<s>"),
                "eos_token_id": ids("</s>"), "pad_token_id": ids("<pad>")}
    vision_cfg = {**LLAVA_VISION, **(vision or {})}
    side = vision_cfg["image_size"] // vision_cfg["patch_size"]
    config = LlavaConfig(text_config=text_cfg, vision_config=vision_cfg, image_token_index=ids("<image>"),
                         vision_feature_layer=-2, vision_feature_select_strategy="default",
                         image_seq_length=side * side, tie_word_embeddings=False)
    return save_sensitive(out_dir, seed, LlavaForConditionalGeneration, config, llava_processor(tok), tok,
                          never_generate=("<image>",))


# --- LLaVA-OneVision (Qwen2 text) --------------------------------------------------------------------------------
OV_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>")
# llava-hf/llava-onevision-qwen2-7b-ov-hf chat_template.json
OV_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + ' '}}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}{{ '<image>' }}{% endfor %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'video') %}{{ '<video>' }}{% endfor %}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}{{ '\n' + content['text'] }}"
    "{% endfor %}{% endif %}{{'<|im_end|>\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
OV_TILE = 56  # 384 in the published checkpoint; pinpoints are its multiples of the tile up to 6 x 6 tiles
OV_VISION = {"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 2, "image_size": OV_TILE, "patch_size": PATCH, "vision_use_head": False}


def ov_pinpoints(tile: int, most: int = 6) -> list[list[int]]:
    """The published `image_grid_pinpoints`: every (rows, cols) of 1..6 tiles, row-major."""
    return [[r * tile, c * tile] for r in range(1, most + 1) for c in range(1, most + 1)]


def onevision_processor(tokenizer, tile: int = OV_TILE, patch: int = PATCH):
    """llava-onevision-hf's processor at `tile` (384 in the published checkpoint, 27 x 27 = 729 tokens a tile)."""
    ip = LlavaOnevisionImageProcessor(size={"height": tile, "width": tile}, image_grid_pinpoints=ov_pinpoints(tile),
                                      image_mean=[0.5] * 3, image_std=[0.5] * 3)
    video = LlavaOnevisionVideoProcessor(size={"height": tile, "width": tile}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    return LlavaOnevisionProcessor(image_processor=ip, tokenizer=tokenizer, video_processor=video,
                                   num_image_tokens=(tile // patch) ** 2,
                                   vision_feature_select_strategy="full", vision_aspect_ratio="anyres_max_9",
                                   chat_template=OV_TEMPLATE)


def build_onevision(out_dir: str | Path, seed: int = 0, *, text: dict[str, Any] | None = None,
                    vision: dict[str, Any] | None = None, extra_words: tuple[str, ...] = ()) -> Path:
    """Write a complete tiny LLaVA-OneVision (Qwen2) checkpoint."""
    tok = chatml_tokenizer(OV_SPECIALS, OV_TEMPLATE, extra_words)
    ids = tok.convert_tokens_to_ids
    text_cfg = {**DEFAULT_TEXT, **(text or {}), "model_type": "qwen2", "vocab_size": len(tok),
                "max_position_embeddings": 8192, "eos_token_id": ids("<|im_end|>"),
                "pad_token_id": ids("<|endoftext|>")}
    vision_cfg = {**OV_VISION, **(vision or {})}
    tile = vision_cfg["image_size"]
    config = LlavaOnevisionConfig(text_config=text_cfg, vision_config=vision_cfg, image_token_index=ids("<image>"),
                                  video_token_index=ids("<video>"), vision_feature_layer=-1,
                                  vision_feature_select_strategy="full", vision_aspect_ratio="anyres_max_9",
                                  image_grid_pinpoints=ov_pinpoints(tile), tie_word_embeddings=False)
    return save_sensitive(out_dir, seed, LlavaOnevisionForConditionalGeneration, config,
                          onevision_processor(tok, tile, vision_cfg["patch_size"]), tok,
                          never_generate=("<image>", "<video>"))
