"""Tiny random-weight GLM-4.1V checkpoints of the real transformers class (`Glm4vForConditionalGeneration`).

Structurally real: GQA text backbone with q/k/v biases and partial rotary embeddings (half of each head) split into
M-RoPE sections, a 14 px patch vision tower merged 2x2, and GLM's prompt frame (`[gMASK]<sop>`, role tokens).
"""

from __future__ import annotations

from typing import Any

from transformers import (
    Glm4vConfig,
    Glm4vForConditionalGeneration,
    Glm4vImageProcessor,
    Glm4vProcessor,
    Glm4vVideoProcessor,
)

from vrh_lmms.model.tiny.common import DEFAULT_TEXT, TinyFamily, chat_template
from vrh_lmms.model.tiny.vocab import build_tokenizer

# In the order of the real vocabulary (151329..151344): image/video placeholders follow the begin/end markers.
SPECIALS = (
    "<|endoftext|>",
    "[MASK]",
    "[gMASK]",
    "[sMASK]",
    "<sop>",
    "<eop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "<|begin_of_image|>",
    "<|end_of_image|>",
    "<|begin_of_video|>",
    "<|end_of_video|>",
    "<|image|>",
    "<|video|>",
)
# Kept by decoding: GLM-4.1V wraps its answer box in these, and box parsers read them from the text.
PLAIN = ("<think>", "</think>", "<|begin_of_box|>", "<|end_of_box|>")
# Generation stops at any of these (the real generation_config.json lists all three).
STOP = ("<|endoftext|>", "<|user|>", "<|observation|>")

# The official GLM-4.1V-9B-Thinking template (zai-org/GLM-4.1V-9B-Thinking), reproduced character for character.
CHAT_TEMPLATE = chat_template("glm4v")

DEFAULT_VISION = {"depth": 2, "hidden_size": 32, "num_heads": 2, "image_size": 112, "patch_size": 14,
                  "spatial_merge_size": 2, "temporal_patch_size": 2}
# The real model rotates half of each head (partial_rotary_factor 0.5) with sections 8/12/12 of 32 frequencies;
# head_dim 16 leaves 4 frequencies, split 2/1/1.
ROPE = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5, "mrope_section": [2, 1, 1]}


def make_tokenizer(extra_words: tuple[str, ...] = ()):
    return build_tokenizer(
        SPECIALS,
        plain_tokens=PLAIN,
        extra_words=extra_words,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    )


def make_processor(tokenizer, *, min_pixels: int = 112 * 112, max_pixels: int = 28 * 28 * 256):
    size = {"shortest_edge": min_pixels, "longest_edge": max_pixels}
    image_processor = Glm4vImageProcessor(size=size, patch_size=14, merge_size=2, temporal_patch_size=2)
    video_processor = Glm4vVideoProcessor(size={"shortest_edge": min_pixels, "longest_edge": max_pixels * 4},
                                          patch_size=14, merge_size=2, temporal_patch_size=2)
    return Glm4vProcessor(image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor,
                          chat_template=CHAT_TEMPLATE)


def make_config(tokenizer, text: dict[str, Any] | None = None, vision: dict[str, Any] | None = None,
                initializer_range: float = 0.02):
    text_cfg = {**DEFAULT_TEXT, **(text or {})}
    # GLM's attention derives head_dim from hidden_size / heads; it has no head_dim field.
    if text_cfg.pop("head_dim", None) not in (None, text_cfg["hidden_size"] // text_cfg["num_attention_heads"]):
        raise ValueError("GLM-4V derives head_dim from hidden_size / num_attention_heads")
    ids = tokenizer.convert_tokens_to_ids
    text_cfg.update(vocab_size=len(tokenizer), max_position_embeddings=4096, rope_parameters=dict(ROPE),
                    pad_token_id=ids("<|endoftext|>"), eos_token_id=[ids(t) for t in STOP],
                    initializer_range=initializer_range)
    # The patch merger's inner width is the text MLP width, as in the real checkpoint (13696 both).
    vision_cfg = {**DEFAULT_VISION, **(vision or {}), "out_hidden_size": text_cfg["hidden_size"],
                  "intermediate_size": text_cfg["intermediate_size"], "initializer_range": initializer_range}
    return Glm4vConfig(
        text_config=text_cfg,
        vision_config=vision_cfg,
        image_token_id=ids("<|image|>"),
        video_token_id=ids("<|video|>"),
        image_start_token_id=ids("<|begin_of_image|>"),
        image_end_token_id=ids("<|end_of_image|>"),
        video_start_token_id=ids("<|begin_of_video|>"),
        video_end_token_id=ids("<|end_of_video|>"),
        tie_word_embeddings=False,
    )


# the factory: a complete tiny GLM-4.1V checkpoint (config, weights, tokenizer, processor, template)
FAMILY = TinyFamily("GLM-4.1V", Glm4vForConditionalGeneration,
                     make_tokenizer, make_config, lambda tokenizer, vision, **kw: make_processor(tokenizer, **kw),
                     stop_tokens=STOP, pad_token="<|endoftext|>")
build = FAMILY.build
