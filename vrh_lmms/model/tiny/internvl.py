"""Tiny random-weight InternVL3 (HF-native) checkpoints: `InternVLForConditionalGeneration` with Qwen2 text.

Structurally real: InternViT vision tower (layer scale, absolute position embeddings), pixel-shuffle downsampling
by 0.5 and an MLP projector, tiles of the processor's tile size (`<img>` + per-tile context tokens + `</img>`),
GQA Qwen2 text backbone with q/k/v biases.
"""

from __future__ import annotations

from typing import Any

from transformers import (
    GotOcr2ImageProcessor,
    InternVLConfig,
    InternVLForConditionalGeneration,
    InternVLProcessor,
    InternVLVideoProcessor,
)

from vrh_lmms.model.tiny.common import DEFAULT_TEXT, TinyFamily, chat_template
from vrh_lmms.model.tiny.qwen2_5_vl import SPECIALS as QWEN25_SPECIALS
from vrh_lmms.model.tiny.vocab import build_tokenizer

# InternVL3 reuses the Qwen2.5 vocabulary and adds its own image / grounding tokens (all special).
SPECIALS = (*QWEN25_SPECIALS, "<img>", "</img>", "<IMG_CONTEXT>", "<quad>", "</quad>", "<ref>", "</ref>", "<box>",
            "</box>", "<video>")

# The official InternVL3-hf template: `<IMG_CONTEXT>` is the placeholder the processor expands into
# `<img>` + image_seq_length * tiles `<IMG_CONTEXT>` + `</img>`.
CHAT_TEMPLATE = chat_template("internvl")

TILE = 112  # processor tile size = vision image size (448 in the real model)
DEFAULT_VISION = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
                  "image_size": [TILE, TILE], "patch_size": [14, 14], "use_qk_norm": False,
                  "norm_type": "layer_norm", "use_absolute_position_embeddings": True, "hidden_act": "gelu"}
DOWNSAMPLE = 0.5


def tokens_per_tile(vision: dict[str, Any] | None = None) -> int:
    """Context tokens per tile: (tile / patch)^2 patches, pixel-shuffled by the downsample ratio."""
    v = {**DEFAULT_VISION, **(vision or {})}
    side = v["image_size"][0] // v["patch_size"][0]
    return int(side * side * DOWNSAMPLE * DOWNSAMPLE)


def make_tokenizer(extra_words: tuple[str, ...] = ()):
    return build_tokenizer(
        SPECIALS,
        extra_words=extra_words,
        named_specials={"start_image_token": "<img>", "end_image_token": "</img>",
                        "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>"},
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=8192,
    )


def make_processor(tokenizer, *, vision: dict[str, Any] | None = None, max_patches: int = 12):
    side = int({**DEFAULT_VISION, **(vision or {})}["image_size"][0])  # tile = the vision tower's input size
    size = {"height": side, "width": side}
    image_processor = GotOcr2ImageProcessor(size=size, crop_to_patches=True, min_patches=1, max_patches=max_patches,
                                            image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])
    video_processor = InternVLVideoProcessor(size=size, image_mean=[0.485, 0.456, 0.406],
                                             image_std=[0.229, 0.224, 0.225])
    return InternVLProcessor(image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor,
                             image_seq_length=tokens_per_tile(vision), chat_template=CHAT_TEMPLATE)


def make_config(tokenizer, text: dict[str, Any] | None = None, vision: dict[str, Any] | None = None,
                initializer_range: float = 0.02):
    text_cfg = {**DEFAULT_TEXT, **(text or {})}
    ids = tokenizer.convert_tokens_to_ids
    text_cfg.update(model_type="qwen2", vocab_size=len(tokenizer), max_position_embeddings=4096,
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                    bos_token_id=ids("<|endoftext|>"), eos_token_id=ids("<|im_end|>"),
                    pad_token_id=ids("<|endoftext|>"), initializer_range=initializer_range)
    vision_cfg = {**DEFAULT_VISION, **(vision or {}), "initializer_range": initializer_range}
    return InternVLConfig(
        text_config=text_cfg,
        vision_config=vision_cfg,
        image_token_id=ids("<IMG_CONTEXT>"),
        image_seq_length=tokens_per_tile(vision),
        downsample_ratio=DOWNSAMPLE,
        tie_word_embeddings=False,
    )


# the factory: a complete tiny InternVL3-hf checkpoint (config, weights, tokenizer, processor, template)
FAMILY = TinyFamily("InternVL3-hf", InternVLForConditionalGeneration, make_tokenizer, make_config,
                     lambda tokenizer, vision, **kw: make_processor(tokenizer, vision=vision, **kw))
build = FAMILY.build
