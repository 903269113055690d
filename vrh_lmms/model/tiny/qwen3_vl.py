"""Tiny random-weight Qwen3-VL checkpoints of the real transformers class.

Structurally real: GQA text backbone with q/k norms, interleaved M-RoPE, a 16 px patch vision tower with learned
position embeddings and DeepStack mergers that inject vision features into the first text layers.
"""

from __future__ import annotations

from typing import Any

from transformers import (
    Qwen2VLImageProcessor,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
    Qwen3VLProcessor,
    Qwen3VLVideoProcessor,
)

from vrh_lmms.model.tiny.common import DEFAULT_TEXT, TinyFamily, chat_template
from vrh_lmms.model.tiny.qwen2_5_vl import SPECIALS as QWEN25_SPECIALS
from vrh_lmms.model.tiny.vocab import build_tokenizer

# Qwen3 keeps Qwen2.5-VL's special tokens and adds the reasoning / tool tokens of the Qwen3 vocabulary.
SPECIALS = (*QWEN25_SPECIALS, "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
            "<|file_sep|>")
PLAIN = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")

# The official Qwen3-VL Instruct template (tools, tool responses with images, assistant tool calls), reproduced.
CHAT_TEMPLATE = chat_template("qwen3_vl")

DEFAULT_VISION = {"depth": 3, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": 16,
                  "spatial_merge_size": 2, "temporal_patch_size": 2, "num_position_embeddings": 64,
                  "deepstack_visual_indexes": [0, 1]}
# Interleaved M-RoPE sections (t, h, w) over head_dim / 2 = 8 frequencies; the real 24/20/20 split scaled down.
MROPE_SECTION = [4, 2, 2]


def make_tokenizer(extra_words: tuple[str, ...] = ()):
    return build_tokenizer(
        SPECIALS,
        plain_tokens=PLAIN,
        extra_words=extra_words,
        named_specials={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
                        "vision_bos_token": "<|vision_start|>", "vision_eos_token": "<|vision_end|>"},
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    )


def make_processor(tokenizer, *, min_pixels: int = 32 * 32 * 4, max_pixels: int = 32 * 32 * 256):
    # Qwen3-VL normalises with mean = std = 0.5 and cuts 16 px patches, merged 2x2 into 32 px cells.
    common = {"patch_size": 16, "merge_size": 2, "temporal_patch_size": 2, "image_mean": [0.5, 0.5, 0.5],
              "image_std": [0.5, 0.5, 0.5]}
    image_processor = Qwen2VLImageProcessor(size={"shortest_edge": min_pixels, "longest_edge": max_pixels}, **common)
    video_processor = Qwen3VLVideoProcessor(size={"shortest_edge": min_pixels, "longest_edge": max_pixels * 4},
                                            **common)
    return Qwen3VLProcessor(image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor,
                            chat_template=CHAT_TEMPLATE)


def make_config(tokenizer, text: dict[str, Any] | None = None, vision: dict[str, Any] | None = None,
                initializer_range: float = 0.02):
    text_cfg = {**DEFAULT_TEXT, **(text or {})}
    vision_cfg = {**DEFAULT_VISION, **(vision or {}), "out_hidden_size": text_cfg["hidden_size"],
                  "initializer_range": initializer_range}
    ids = tokenizer.convert_tokens_to_ids
    text_cfg.update(
        vocab_size=len(tokenizer),
        max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": MROPE_SECTION,
                         "mrope_interleaved": True},
        bos_token_id=ids("<|endoftext|>"),
        eos_token_id=ids("<|im_end|>"),
        pad_token_id=ids("<|endoftext|>"),
        initializer_range=initializer_range,
    )
    return Qwen3VLConfig(
        text_config=text_cfg,
        vision_config=vision_cfg,
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
    )


# the factory: a complete tiny Qwen3-VL checkpoint (config, weights, tokenizer, processor, template)
FAMILY = TinyFamily("Qwen3-VL", Qwen3VLForConditionalGeneration,
                     make_tokenizer, make_config, lambda tokenizer, vision, **kw: make_processor(tokenizer, **kw))
build = FAMILY.build
