"""Tiny random-weight MiniCPM-V 4.6 checkpoints (`MiniCPMV4_6ForConditionalGeneration`).

Modelled on openbmb/MiniCPM-V-4.6: a SigLIP-style NaViT tower (variable image sizes) with a 2 x 2 window-attention
merger inserted after one of its layers, then a 2 x 2 downsampling MLP (16 x fewer tokens than patches); each image
written by MiniCPMV4_6Processor as `<image_id>0</image_id>` then the source view (the image resized, aspect kept, to
about `scale_resolution`^2 pixels, sides multiples of 4 patches) between `<image>` / `</image>`, then, for a large
image, the slices of the refined image row by row, each between `<slice>` / `</slice>`, rows separated by a newline.
The published text model is Qwen3.5 (linear-attention layers with a full-attention layer every fourth); the tiny
text keeps the Qwen3.5 class with full-attention layers only by default (its family tests need heads in every
layer); `text={"layer_types": [...]}` builds a hybrid one (heads only in its full-attention layers). Tiny settings: 7 px patches, `scale_resolution` 112 (448 and 14 in the published one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import (
    MiniCPMV4_6Config,
    MiniCPMV4_6ForConditionalGeneration,
    MiniCPMV4_6ImageProcessor,
    MiniCPMV4_6Processor,
    MiniCPMV4_6VideoProcessor,
    MiniCPMV4_7Config,
    MiniCPMV4_7ForConditionalGeneration,
    MiniCPMV4_7Processor,
)

from vrh_lmms.model.tiny.common import DEFAULT_TEXT
from vrh_lmms.model.tiny.sensitive import save_sensitive
from vrh_lmms.model.tiny.vocab import build_tokenizer

NAMED = {"image_token": "<|image_pad|>", "video_token": "<|video_pad|>", "image_start_token": "<image>",
         "image_end_token": "</image>", "slice_start_token": "<slice>", "slice_end_token": "</slice>",
         "image_id_start_token": "<image_id>", "image_id_end_token": "</image_id>"}
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", *NAMED.values())
NEWLINE = "\n"
# Qwen chat turns with the image placeholder before the text (the published template was not available offline)
TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}{{ '<|image_pad|>\n' }}{% endif %}"
    "{% endfor %}{% for item in message['content'] %}{% if item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}{{ '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
PATCH, SCALE = 7, 112
VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
          "image_size": 112, "patch_size": PATCH}
TEXT = {"layer_types": ["full_attention", "full_attention"], "linear_num_key_heads": 2, "linear_num_value_heads": 2,
        "linear_key_head_dim": 16, "linear_value_head_dim": 16}


def minicpmv_processor(tokenizer, scale: int = SCALE, patch: int = PATCH, max_slices: int = 9, slice_mode: bool = True,
                       processor_cls=MiniCPMV4_6Processor):
    """MiniCPM-V 4.6's processor (scale_resolution 448, patch 14, at most 9 slices, 16x downsampling); 4.7's
    (`MiniCPMV4_7Processor`) takes the same image and video processors."""
    kw = {"scale_resolution": scale, "patch_size": patch, "max_slice_nums": max_slices, "slice_mode": slice_mode}
    return processor_cls(image_processor=MiniCPMV4_6ImageProcessor(**kw), video_processor=MiniCPMV4_6VideoProcessor(**kw),
                         tokenizer=tokenizer, chat_template=TEMPLATE)


def minicpmv_tokenizer(extra_words: tuple[str, ...] = ()):
    tok = build_tokenizer(SPECIALS, plain_tokens=(NEWLINE,), extra_words=extra_words, named_specials=NAMED,
                          eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=TEMPLATE)
    tok.padding_side = "left"
    return tok


def build(out_dir: str | Path, seed: int = 0, *, text: dict[str, Any] | None = None,
          vision: dict[str, Any] | None = None, extra_words: tuple[str, ...] = (), version: str = "4.6") -> Path:
    """Write a complete tiny MiniCPM-V 4.6 (or, `version="4.7"`, 4.7) checkpoint (config, weights, tokenizer,
    processor, template). 4.7 adds marker ids to its config: its forward groups each image's views by them."""
    tok = minicpmv_tokenizer(extra_words)
    ids = tok.convert_tokens_to_ids
    text_cfg = {**DEFAULT_TEXT, **TEXT, **(text or {}), "model_type": "qwen3_5_text", "vocab_size": len(tok),
                "max_position_embeddings": 8192, "eos_token_id": ids("<|im_end|>"),
                "pad_token_id": ids("<|endoftext|>")}
    vision_cfg = {**VISION, **(vision or {})}
    common = {"text_config": text_cfg, "vision_config": vision_cfg, "insert_layer_id": 0,
              "image_size": vision_cfg["image_size"], "image_token_id": ids(NAMED["image_token"]),
              "video_token_id": ids(NAMED["video_token"]), "tie_word_embeddings": False}
    if version == "4.7":
        markers = {"image_start_id": ids("<image>"), "image_end_id": ids("</image>"),
                   "slice_start_id": ids("<slice>"), "slice_end_id": ids("</slice>"), "newline_id": ids(NEWLINE)}
        config, model_cls = MiniCPMV4_7Config(**common, **markers), MiniCPMV4_7ForConditionalGeneration
        processor = minicpmv_processor(tok, patch=vision_cfg["patch_size"], processor_cls=MiniCPMV4_7Processor)
    else:
        config, model_cls = MiniCPMV4_6Config(**common), MiniCPMV4_6ForConditionalGeneration
        processor = minicpmv_processor(tok, patch=vision_cfg["patch_size"])
    return save_sensitive(out_dir, seed, model_cls, config, processor, tok,
                          stop_tokens=("<|im_end|>",), pad_token="<|endoftext|>")
