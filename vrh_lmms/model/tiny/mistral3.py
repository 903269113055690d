"""Tiny random-weight Mistral 3 checkpoints (`Mistral3ForConditionalGeneration`: Pixtral vision, Mistral text).

Modelled on mistralai/Mistral-Small-3.1-24B-Instruct-2503: a Pixtral tower with 2D RoPE on variable-size images,
2 x 2 patch merging before the projector, each image written by PixtralProcessor as rows of `[IMG]` tokens ended by
`[IMG_BREAK]`, the last by `[IMG_END]`, after `<s>[INST]` (lmms-eval's mistral3_vl prompt), and GQA Mistral text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import Mistral3Config, Mistral3ForConditionalGeneration, PixtralImageProcessor, PixtralProcessor

from vrh_lmms.model.tiny.common import DEFAULT_TEXT
from vrh_lmms.model.tiny.sensitive import save_sensitive
from vrh_lmms.model.tiny.vocab import build_tokenizer

SPECIALS = ("<s>", "</s>", "[INST]", "[/INST]", "[IMG]", "[IMG_BREAK]", "[IMG_END]", "<pad>")
NEWLINE = "\n"
# Mistral-Small-3.1-Instruct's template, reduced to the user / assistant turns with images first in a turn
TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST]' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for block in message['content'] %}"
    "{% if block['type'] == 'image' %}{{ '[IMG]' }}{% elif block['type'] == 'text' %}{{ block['text'] }}{% endif %}"
    "{% endfor %}{% endif %}{{ '[/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ message['content'] if message['content'] is string else message['content'][0]['text'] }}{{ eos_token }}"
    "{% endif %}{% endfor %}"
)
PATCH, MERGE, LONGEST = 14, 2, 224  # Mistral-Small-3.1: patch 14, merge 2, longest edge 1540
VISION = {"model_type": "pixtral", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 2, "head_dim": 16, "image_size": LONGEST, "patch_size": PATCH}


def mistral3_processor(tokenizer, longest_edge: int = LONGEST, patch: int = PATCH, merge: int = MERGE):
    """Mistral 3's processor (`longest_edge` 1540, patch 14, merge 2 in the published checkpoint)."""
    ip = PixtralImageProcessor(size={"longest_edge": longest_edge}, patch_size={"height": patch, "width": patch})
    return PixtralProcessor(image_processor=ip, tokenizer=tokenizer, patch_size=patch, spatial_merge_size=merge,
                            chat_template=TEMPLATE)


def build(out_dir: str | Path, seed: int = 0, *, text: dict[str, Any] | None = None,
          vision: dict[str, Any] | None = None, extra_words: tuple[str, ...] = ()) -> Path:
    """Write a complete tiny Mistral 3 checkpoint (config, weights, tokenizer, processor, template)."""
    tok = build_tokenizer(SPECIALS, plain_tokens=(NEWLINE,), extra_words=extra_words,
                          named_specials={"image_token": "[IMG]"}, bos_token="<s>", eos_token="</s>",
                          pad_token="<pad>", chat_template=TEMPLATE, padding_side="left")
    ids = tok.convert_tokens_to_ids
    text_cfg = {**DEFAULT_TEXT, **(text or {}), "model_type": "mistral", "vocab_size": len(tok),
                "max_position_embeddings": 8192, "sliding_window": None, "bos_token_id": ids("<s>"),
                "eos_token_id": ids("</s>"), "pad_token_id": ids("<pad>")}
    vision_cfg = {**VISION, **(vision or {})}
    config = Mistral3Config(text_config=text_cfg, vision_config=vision_cfg, image_token_index=ids("[IMG]"),
                            spatial_merge_size=MERGE, vision_feature_layer=-1, multimodal_projector_bias=False,
                            tie_word_embeddings=False)
    return save_sensitive(out_dir, seed, Mistral3ForConditionalGeneration, config,
                          mistral3_processor(tok, vision_cfg["image_size"], vision_cfg["patch_size"]), tok,
                          init_std=0.15, never_generate=("[IMG]",))
