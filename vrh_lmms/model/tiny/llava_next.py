"""Tiny random-weight LLaVA-NeXT checkpoints with Llama-3 text (`LlavaNextForConditionalGeneration`).

Modelled on llava-hf/llama3-llava-next-8b-hf: CLIP vision tower read at its penultimate layer (CLS dropped), a
2-layer MLP projector, AnyRes tiling over `image_grid_pinpoints` with a learned newline embedding closing every
row of the unpadded tile grid, and a GQA Llama-3 text backbone whose tokenizer prepends `<|begin_of_text|>`.
"""

from __future__ import annotations

from typing import Any

from transformers import LlavaNextConfig, LlavaNextForConditionalGeneration, LlavaNextImageProcessor, LlavaNextProcessor

from vrh_lmms.model.tiny.common import DEFAULT_TEXT, TinyFamily, chat_template
from vrh_lmms.model.tiny.vocab import build_tokenizer

SPECIALS = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|reserved_special_token_2|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
    # added by llava-hf on top of the Llama-3 vocabulary
    "<image>",
    "<pad>",
)
STOP = ("<|end_of_text|>", "<|eot_id|>")

# The official llama3-llava-next-8b-hf template: images first, then text, one `<|eot_id|>` per text part.
CHAT_TEMPLATE = chat_template("llava_next")

TILE = 112  # vision image size and AnyRes tile (336 in the real model); pinpoints are the real ones scaled by 1/3
PINPOINTS = [[TILE, 2 * TILE], [2 * TILE, TILE], [2 * TILE, 2 * TILE], [3 * TILE, TILE], [TILE, 3 * TILE]]
PATCH = 14
DEFAULT_VISION = {"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                  "num_attention_heads": 2, "image_size": TILE, "patch_size": PATCH, "projection_dim": 32,
                  "hidden_act": "quick_gelu"}


def make_tokenizer(extra_words: tuple[str, ...] = ()):
    return build_tokenizer(
        SPECIALS,
        extra_words=extra_words,
        named_specials={"image_token": "<image>"},
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        pad_token="<pad>",
        chat_template=CHAT_TEMPLATE,
        add_bos_token=True,
    )


def make_processor(tokenizer):
    clip_mean, clip_std = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
    image_processor = LlavaNextImageProcessor(size={"shortest_edge": TILE}, crop_size={"height": TILE, "width": TILE},
                                              image_grid_pinpoints=PINPOINTS, image_mean=clip_mean,
                                              image_std=clip_std)
    # CLIP prepends a CLS embedding that the "default" strategy drops: +1 here, -1 in the processor.
    return LlavaNextProcessor(image_processor=image_processor, tokenizer=tokenizer, patch_size=PATCH,
                              vision_feature_select_strategy="default", num_additional_image_tokens=1,
                              chat_template=CHAT_TEMPLATE)


def llama3_text(tokenizer, text: dict[str, Any] | None, initializer_range: float, stop: tuple[str, ...],
                pad: str) -> dict[str, Any]:
    """The Llama-3 text config of the families built on it (LLaVA-NeXT here, Idefics3): the tiny geometry with
    `text` overrides, Llama-3's rope and special tokens, the family's stop tokens and pad token."""
    text_cfg = {**DEFAULT_TEXT, **(text or {})}
    ids = tokenizer.convert_tokens_to_ids
    text_cfg.update(model_type="llama", vocab_size=len(tokenizer), max_position_embeddings=8192,
                    rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                    bos_token_id=ids("<|begin_of_text|>"), eos_token_id=[ids(t) for t in stop],
                    pad_token_id=ids(pad), initializer_range=initializer_range)
    return text_cfg


def make_config(tokenizer, text: dict[str, Any] | None = None, vision: dict[str, Any] | None = None,
                initializer_range: float = 0.02):
    text_cfg = llama3_text(tokenizer, text, initializer_range, STOP, "<pad>")
    ids = tokenizer.convert_tokens_to_ids
    vision_cfg = {**DEFAULT_VISION, **(vision or {}), "initializer_range": initializer_range}
    side = vision_cfg["image_size"] // vision_cfg["patch_size"]
    return LlavaNextConfig(
        text_config=text_cfg,
        vision_config=vision_cfg,
        image_token_index=ids("<image>"),
        image_grid_pinpoints=PINPOINTS,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        image_seq_length=side * side,
        tie_word_embeddings=False,
    )


# the factory: a complete tiny LLaVA-NeXT (Llama-3) checkpoint (config, weights, tokenizer, processor, template)
FAMILY = TinyFamily("LLaVA-NeXT (Llama-3)", LlavaNextForConditionalGeneration,
                     make_tokenizer, make_config, lambda tokenizer, vision: make_processor(tokenizer),
                     stop_tokens=STOP, pad_token="<pad>")
build = FAMILY.build
