"""Tiny random-weight Molmo 2 checkpoints (`Molmo2ForConditionalGeneration`).

Modelled on allenai/Molmo2-8B: a SigLIP-style ViT on square crops, an attention-pooling adapter over 2 x 2 patch
windows (padded centrally), a low-resolution view of the whole image first, then the overlapping high-resolution
crops (overlap margins dropped) stitched into one pooled grid, each written as `<im_patch>` rows closed by
`<im_col>`, and Qwen3-style text (QK-norm) behind ChatML. Crops here are 112 px with 1-patch margins and at most 4
crops (378 px, 4-patch margins and 8 crops in the published processor).
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
from vrh_lmms.model.tiny.vocab import chatml_tokenizer

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|image|>", "<|video|>", "<im_patch>", "<im_col>",
            "<im_start>", "<low_res_im_start>", "<frame_start>", "<im_end>", "<frame_end>", "<im_low>")
TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' }}{% if message['content'] is string %}"
    "{{ message['content'] }}{% else %}{% for item in message['content'] %}{% if item['type'] == 'image' %}"
    "{{ '<|image|>' }}{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CROP, PATCH = 112, 14
VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
          "num_key_value_heads": 2, "head_dim": 16, "image_size": [CROP, CROP], "patch_size": PATCH,
          "num_position_embeddings": (CROP // PATCH) ** 2}


def molmo2_processor(tokenizer, crop: int = CROP, patch: int = PATCH, max_crops: int = 4,
                     margins: tuple[int, int] = (1, 1)):
    """Molmo 2's processor (378 px crops, patch 14, 8 crops, margins 4 / 4, 2 x 2 pooling when published)."""
    ip = Molmo2ImageProcessor(size={"height": crop, "width": crop}, patch_size=patch, max_crops=max_crops,
                              overlap_margins=list(margins), pooling_size=[2, 2])
    video = Molmo2VideoProcessor(size={"height": crop, "width": crop}, patch_size=patch)
    return Molmo2Processor(image_processor=ip, video_processor=video, tokenizer=tokenizer, chat_template=TEMPLATE)


def build(out_dir: str | Path, seed: int = 0, *, text: dict[str, Any] | None = None,
          vision: dict[str, Any] | None = None, extra_words: tuple[str, ...] = ()) -> Path:
    """Write a complete tiny Molmo 2 checkpoint (config, weights, tokenizer, processor, template)."""
    tok = chatml_tokenizer(SPECIALS, TEMPLATE, extra_words, image_token="<|image|>", video_token="<|video|>")
    ids = tok.convert_tokens_to_ids
    text_cfg = {**DEFAULT_TEXT, **(text or {}), "vocab_size": len(tok), "additional_vocab_size": 8,
                "max_position_embeddings": 8192, "qk_norm_type": "qwen3"}
    vision_cfg = {**VISION, **(vision or {})}
    adapter = {"vision_feature_layer": [-1], "hidden_size": vision_cfg["hidden_size"], "num_attention_heads": 2,
               "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
               "text_hidden_size": text_cfg["hidden_size"]}
    config = Molmo2Config(vision_config=vision_cfg, adapter_config=adapter, text_config=text_cfg,
                          image_start_token_id=ids("<im_start>"), low_res_image_start_token_id=ids("<low_res_im_start>"),
                          image_end_token_id=ids("<im_end>"), image_patch_id=ids("<im_patch>"),
                          frame_start_token_id=ids("<frame_start>"), frame_end_token_id=ids("<frame_end>"),
                          pad_token_id=ids("<|endoftext|>"), eos_token_id=ids("<|im_end|>"))
    return save_sensitive(out_dir, seed, Molmo2ForConditionalGeneration, config,
                          molmo2_processor(tok, vision_cfg["image_size"][0], vision_cfg["patch_size"]), tok,
                          never_generate=("<im_patch>",))
