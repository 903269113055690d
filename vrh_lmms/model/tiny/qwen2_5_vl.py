"""Tiny random-weight Qwen2.5-VL checkpoints of the real transformers class."""

from __future__ import annotations

from typing import Any

from transformers import (
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2_5_VLProcessor,
    Qwen2VLImageProcessor,
    Qwen2VLVideoProcessor,
)

from vrh_lmms.model.tiny.common import TinyFamily, chat_template
from vrh_lmms.model.tiny.vocab import build_tokenizer

SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# The official Qwen2-VL / Qwen2.5-VL template, reproduced so prompts render exactly as with real checkpoints.
CHAT_TEMPLATE = chat_template("qwen2_5_vl")

# Text backbone geometry of the default test model: GQA (4 query heads share 2 kv heads), 2 layers.
DEFAULT_TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16)
DEFAULT_VISION = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=14,
                      spatial_merge_size=2, temporal_patch_size=2, window_size=112, fullatt_block_indexes=[1])


def make_tokenizer(extra_words: tuple[str, ...] = ()):
    return build_tokenizer(
        SPECIALS,
        extra_words=extra_words,
        named_specials={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
                        "vision_bos_token": "<|vision_start|>", "vision_eos_token": "<|vision_end|>"},
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    )


def make_processor(tokenizer, *, patch_size: int = 14, merge_size: int = 2,
                   min_pixels: int = 28 * 28 * 4, max_pixels: int = 28 * 28 * 256):
    image_processor = Qwen2VLImageProcessor(patch_size=patch_size, merge_size=merge_size, temporal_patch_size=2,
                                            min_pixels=min_pixels, max_pixels=max_pixels)
    video_processor = Qwen2VLVideoProcessor(patch_size=patch_size, merge_size=merge_size, temporal_patch_size=2,
                                            min_pixels=min_pixels, max_pixels=max_pixels)
    return Qwen2_5_VLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                               video_processor=video_processor, chat_template=CHAT_TEMPLATE)


def make_config(tokenizer, text: dict[str, Any] | None = None, vision: dict[str, Any] | None = None,
                initializer_range: float = 0.02, rope_theta: float = 10000.0,
                mrope_section: list[int] | None = None):
    text_cfg = {**DEFAULT_TEXT, **(text or {})}
    vision_cfg = {**DEFAULT_VISION, **(vision or {})}
    vision_cfg["out_hidden_size"] = text_cfg["hidden_size"]
    half = text_cfg["head_dim"] // 2
    # mrope sections (t, h, w) must cover head_dim / 2 rotary frequencies.
    mrope = list(mrope_section) if mrope_section else [half - 2 * (half // 3), half // 3, half // 3]
    if sum(mrope) != half:
        raise ValueError(f"mrope_section {mrope} must sum to head_dim / 2 = {half}")
    ids = tokenizer.convert_tokens_to_ids
    text_cfg.update(
        vocab_size=len(tokenizer),
        max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": float(rope_theta), "mrope_section": mrope},
        bos_token_id=ids("<|endoftext|>"),
        eos_token_id=ids("<|im_end|>"),
        pad_token_id=ids("<|endoftext|>"),
        initializer_range=initializer_range,
    )
    vision_cfg["initializer_range"] = initializer_range
    return Qwen2_5_VLConfig(
        text_config=text_cfg,
        vision_config=vision_cfg,
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
    )


# the factory: a complete tiny Qwen2.5-VL checkpoint (config, weights, tokenizer, processor, template)
FAMILY = TinyFamily("Qwen2.5-VL", Qwen2_5_VLForConditionalGeneration,
                     make_tokenizer, make_config, lambda tokenizer, vision, **kw: make_processor(tokenizer, **kw))
build = FAMILY.build
