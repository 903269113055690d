"""Tiny random-weight Molmo 2 checkpoints (`Molmo2ForConditionalGeneration`).

Modelled on allenai/Molmo2-8B: a SigLIP-style ViT whose features from two layers are concatenated, pooled 2 x 2 by
an attention adapter and projected; each image written by Molmo2Processor as a low-resolution view (the whole image
squashed to one crop) then the high-resolution view (the image squashed onto a canvas of overlapping crops), each
as rows of `<im_patch>` closed by `<im_col>` between `<low_res_im_start>` / `<im_start>` and `<im_end>`; image
features are added to the `<im_patch>` embeddings, and every image token attends to every other one
(bidirectional, `mm_token_type_ids`); Qwen3-style text (QK-norm, GQA). Prompts are Qwen chat turns with the image
placeholder `<|image|>` before the text; `<|im_end|>` is both bos and eos, as in the published tokenizer.

Tiny settings: 105 px crops of 7 px patches (15 x 15 patches, 8 x 8 tokens after pooling, padded), overlap margins of 4
patches (the published ratio: 378 px crops, 14 px patches, margins 4 of 27), at most 8 crops.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import (
    Molmo2Config,
    Molmo2ForConditionalGeneration,
    Molmo2ImageProcessor,
    Molmo2Processor,
    Molmo2VideoProcessor,
)

from vrh_lmms.model.tiny.common import DEFAULT_TEXT
from vrh_lmms.model.tiny.sensitive import save_sensitive
from vrh_lmms.model.tiny.vocab import build_tokenizer

IMAGE_TOKENS = ("<im_patch>", "<im_col>", "<im_start>", "<low_res_im_start>", "<frame_start>", "<im_end>",
                "<frame_end>", "<im_low>")
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|image|>", "<|video|>", *IMAGE_TOKENS)
NEWLINE = "\n"
# Qwen chat turns, images first in a turn, as Molmo2's processor expects one `<|image|>` per image
TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}{{ '<|image|>' }}{% endif %}{% endfor %}"
    "{% for item in message['content'] %}{% if item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}"
    "{% endif %}{{ '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}"
)
CROP, PATCH = 105, 7  # Molmo2-8B: 378 px crops, 14 px patches (27 a side: odd, so pooling pads, as here with 15)
CLIP_MEAN, CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
          "num_key_value_heads": 2, "head_dim": 16, "image_size": [CROP, CROP], "patch_size": PATCH}
ADAPTER = {"vision_feature_layer": [-1, -2], "hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 2,
           "head_dim": 16, "intermediate_size": 64}


def molmo2_processor(tokenizer, crop: int = CROP, patch: int = PATCH, max_crops: int = 8,
                     margins: tuple[int, int] = (4, 4), pooling: tuple[int, int] = (2, 2)):
    """Molmo2's processor (Molmo2-8B: 378 px crops, patch 14, at most 8 crops, margins 4 / 4, 2 x 2 pooling)."""
    ip = Molmo2ImageProcessor(size={"height": crop, "width": crop}, patch_size=patch, max_crops=max_crops,
                              overlap_margins=list(margins), pooling_size=list(pooling), image_mean=CLIP_MEAN,
                              image_std=CLIP_STD)
    video = Molmo2VideoProcessor(size={"height": crop, "width": crop}, patch_size=patch, image_mean=CLIP_MEAN,
                                 image_std=CLIP_STD)
    return Molmo2Processor(image_processor=ip, video_processor=video, tokenizer=tokenizer, chat_template=TEMPLATE)


def molmo2_tokenizer(extra_words: tuple[str, ...] = ()):
    tok = build_tokenizer(SPECIALS, plain_tokens=(NEWLINE,), extra_words=extra_words,
                          named_specials={"image_token": "<|image|>", "video_token": "<|video|>"},
                          bos_token="<|im_end|>", eos_token="<|im_end|>", pad_token="<|endoftext|>",
                          chat_template=TEMPLATE)
    tok.padding_side = "left"
    return tok


def build(out_dir: str | Path, seed: int = 0, *, text: dict[str, Any] | None = None,
          vision: dict[str, Any] | None = None, extra_words: tuple[str, ...] = ()) -> Path:
    """Write a complete tiny Molmo 2 checkpoint (config, weights, tokenizer, processor, template)."""
    tok = molmo2_tokenizer(extra_words)
    ids = tok.convert_tokens_to_ids
    text_cfg = {**DEFAULT_TEXT, **(text or {}), "vocab_size": len(tok), "additional_vocab_size": 0,
                "max_position_embeddings": 8192, "eos_token_id": ids("<|im_end|>"), "bos_token_id": ids("<|im_end|>"),
                "pad_token_id": ids("<|endoftext|>")}
    vision_cfg = {**VISION, **(vision or {})}
    adapter_cfg = {**ADAPTER, "hidden_size": vision_cfg["hidden_size"], "text_hidden_size": text_cfg["hidden_size"]}
    config = Molmo2Config(text_config=text_cfg, vision_config=vision_cfg, adapter_config=adapter_cfg,
                          image_start_token_id=ids("<im_start>"), low_res_image_start_token_id=ids("<low_res_im_start>"),
                          image_end_token_id=ids("<im_end>"), image_patch_id=ids("<im_patch>"),
                          frame_start_token_id=ids("<frame_start>"), frame_end_token_id=ids("<frame_end>"),
                          tie_word_embeddings=False)
    processor = molmo2_processor(tok, vision_cfg["image_size"][0], vision_cfg["patch_size"])
    return save_sensitive(out_dir, seed, Molmo2ForConditionalGeneration, config, processor, tok,
                          projector="model.multi_modal_projector", stop_tokens=("<|im_end|>",),
                          pad_token="<|endoftext|>")
