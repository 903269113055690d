"""Tiny random-weight Idefics3 checkpoints (`Idefics3ForConditionalGeneration`, the SmolVLM architecture).

Structurally real: SigLIP-style vision tower on fixed-size tiles, pixel-shuffle connector (scale factor 2), image
splitting into a row/col tile grid plus a global image, each tile framed by `<fake_token_around_image>` and its
`<row_i_col_j>` / `<global-img>` tag, rows separated by newlines, and a GQA Llama-3 text backbone.
SmolVLM shares this layout and module tree (`model.text_model`), but its processor needs `num2words`, which this
environment lacks, so the tiny family uses Idefics3's own processor.
"""

from __future__ import annotations

from typing import Any

from transformers import Idefics3Config, Idefics3ForConditionalGeneration, Idefics3ImageProcessor, Idefics3Processor

from vrh_lmms.model.tiny.common import TinyFamily, chat_template
from vrh_lmms.model.tiny.llava_next import SPECIALS as LLAMA3_SPECIALS
from vrh_lmms.model.tiny.llava_next import llama3_text
from vrh_lmms.model.tiny.vocab import build_tokenizer

ROW_COL = tuple(f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6))
SPECIALS = (*(t for t in LLAMA3_SPECIALS if t not in ("<image>", "<pad>")), "<fake_token_around_image>", "<image>",
            "<end_of_utterance>", "<global-img>", *ROW_COL)
STOP = ("<|end_of_text|>", "<|eot_id|>", "<end_of_utterance>")
# Rows of tiles are separated by "\n" in the expanded prompt: keep it a token so positions match the real layout.
NEWLINE = "\n"

# The official Idefics3-8B-Llama3 template (SmolVLM's differs only in its first token, <|im_start|>).
CHAT_TEMPLATE = chat_template("idefics3")

TILE = 112  # vision image size = split tile (364 in Idefics3-8B, 512 in SmolVLM-256M)
SCALE = 2  # pixel-shuffle factor (2 in Idefics3, 4 in SmolVLM-256M)
DEFAULT_VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                  "image_size": TILE, "patch_size": 14}


def tokens_per_tile(vision: dict[str, Any] | None = None) -> int:
    v = {**DEFAULT_VISION, **(vision or {})}
    return (v["image_size"] // v["patch_size"]) ** 2 // (SCALE * SCALE)


def make_tokenizer(extra_words: tuple[str, ...] = ()):
    return build_tokenizer(
        SPECIALS,
        plain_tokens=(NEWLINE,),
        extra_words=("user", "assistant", *extra_words),
        named_specials={"image_token": "<image>"},
        bos_token="<|begin_of_text|>",
        eos_token="<end_of_utterance>",
        pad_token="<|reserved_special_token_0|>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=8192,
    )


def make_processor(tokenizer, vision: dict[str, Any] | None = None, *, max_side: int = 2 * TILE):
    v = {**DEFAULT_VISION, **(vision or {})}
    # Images are resized so the longest side is `max_side` (4 tiles in the real model), then split into tiles of
    # the vision image size; a downscaled global view follows the tiles.
    image_processor = Idefics3ImageProcessor(size={"longest_edge": max_side},
                                             max_image_size={"longest_edge": v["image_size"]},
                                             do_image_splitting=True, image_mean=[0.5, 0.5, 0.5],
                                             image_std=[0.5, 0.5, 0.5])
    return Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer,
                             image_seq_len=tokens_per_tile(vision), chat_template=CHAT_TEMPLATE)


def make_config(tokenizer, text: dict[str, Any] | None = None, vision: dict[str, Any] | None = None,
                initializer_range: float = 0.02):
    text_cfg = llama3_text(tokenizer, text, initializer_range, STOP, "<|reserved_special_token_0|>")
    ids = tokenizer.convert_tokens_to_ids
    vision_cfg = {**DEFAULT_VISION, **(vision or {}), "initializer_range": initializer_range}
    # The top-level (deprecated) pad id defaults to 128002, outside a tiny vocabulary: set it explicitly.
    return Idefics3Config(text_config=text_cfg, vision_config=vision_cfg, image_token_id=ids("<image>"),
                          scale_factor=SCALE, pad_token_id=text_cfg["pad_token_id"], tie_word_embeddings=False)


# the factory: a complete tiny Idefics3 checkpoint (config, weights, tokenizer, processor, template)
# answers that depend on the image and on the heads (vrh_lmms.model.tiny.sensitive)
FAMILY = TinyFamily("Idefics3", Idefics3ForConditionalGeneration,
                    make_tokenizer, make_config, make_processor, stop_tokens=STOP,
                    pad_token="<|reserved_special_token_0|>", sensitive=True, never_generate=("<image>",))
build = FAMILY.build
