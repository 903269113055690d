"""Tiny random-weight Gemma 3 checkpoints (`Gemma3ForConditionalGeneration`).

Modelled on google/gemma-3-4b-it: a SigLIP tower, its patch grid average-pooled to `mm_tokens_per_image` soft tokens
(kernel 2 here, 4 in the real model), an RMS-normed projection, each image written as
`\\n\\n<start_of_image>` + soft tokens + `<end_of_image>\\n\\n`, bidirectional attention inside every image
(token_type_ids), Gemma 3 text with sliding-window and global layers (the window is shorter than a tiny prompt, so
it really cuts), GQA and `query_pre_attn_scalar`, and gemma-3-it's chat template. Pan-and-scan is, as in the
published processor, off unless a call asks for it (`do_pan_and_scan=True`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3ImageProcessor, Gemma3Processor

from vrh_lmms.model.tiny.common import DEFAULT_TEXT
from vrh_lmms.model.tiny.sensitive import save_sensitive
from vrh_lmms.model.tiny.vocab import build_tokenizer

SPECIALS = ("<pad>", "<eos>", "<bos>", "<mask>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>",
            "<end_of_image>", "<image_soft_token>")
NEWLINE = "\n"
# google/gemma-3-4b-it chat_template (system text prefixed to the first user turn; roles user / model)
TEMPLATE = (
    "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- if messages[0]['content'] is string -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}{%- else -%}"
    "{%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}{%- endif -%}"
    "{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set first_user_prefix = \"\" -%}"
    "{%- set loop_messages = messages -%}{%- endif -%}{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'assistant') -%}{%- set role = \"model\" -%}{%- else -%}"
    "{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}"
    "{%- if message['content'] is string -%}{{ message['content'] | trim }}"
    "{%- elif message['content'] is iterable -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}{{ '<start_of_image>' }}{%- elif item['type'] == 'text' -%}"
    "{{ item['text'] | trim }}{%- endif -%}{%- endfor -%}{%- endif -%}{{ '<end_of_turn>\n' }}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{'<start_of_turn>model\n'}}{%- endif -%}"
)
IMAGE_SIZE, PATCH, TOKENS = 112, 7, 64  # gemma-3: 896 px, patch 14, 256 tokens (64 x 64 patches pooled 4 x 4)
VISION = {"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 2, "image_size": IMAGE_SIZE, "patch_size": PATCH, "vision_use_head": False}
# even layers slide over 16 tokens, odd layers are global (gemma-3: 5 local layers of 1024 per global one)
TEXT = {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 16,
        "hidden_activation": "gelu_pytorch_tanh"}


def gemma3_processor(tokenizer, image_size: int = IMAGE_SIZE, tokens: int = TOKENS, **image_kwargs: Any):
    """gemma-3's processor at `image_size` (896 in the published checkpoint), `tokens` soft tokens per image."""
    ip = Gemma3ImageProcessor(size={"height": image_size, "width": image_size}, image_mean=[0.5] * 3,
                              image_std=[0.5] * 3, **image_kwargs)
    return Gemma3Processor(image_processor=ip, tokenizer=tokenizer, image_seq_length=tokens, chat_template=TEMPLATE)


def gemma3_tokenizer(extra_words: tuple[str, ...] = ()):
    tok = build_tokenizer(SPECIALS, plain_tokens=(NEWLINE,), extra_words=extra_words,
                          named_specials={"image_token": "<image_soft_token>", "boi_token": "<start_of_image>",
                                          "eoi_token": "<end_of_image>"},
                          bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", chat_template=TEMPLATE,
                          padding_side="left")
    return tok


def build(out_dir: str | Path, seed: int = 0, *, text: dict[str, Any] | None = None,
          vision: dict[str, Any] | None = None, extra_words: tuple[str, ...] = ()) -> Path:
    """Write a complete tiny Gemma 3 checkpoint (config, weights, tokenizer, processor, template)."""
    tok = gemma3_tokenizer(extra_words)
    ids = tok.convert_tokens_to_ids
    text_cfg = {**DEFAULT_TEXT, **TEXT, **(text or {}), "model_type": "gemma3_text", "vocab_size": len(tok),
                "max_position_embeddings": 8192, "bos_token_id": ids("<bos>"), "eos_token_id": ids("<eos>"),
                "pad_token_id": ids("<pad>")}
    text_cfg["query_pre_attn_scalar"] = text_cfg["head_dim"]
    vision_cfg = {**VISION, **(vision or {})}
    config = Gemma3Config(text_config=text_cfg, vision_config=vision_cfg, mm_tokens_per_image=TOKENS,
                          image_token_index=ids("<image_soft_token>"), boi_token_index=ids("<start_of_image>"),
                          eoi_token_index=ids("<end_of_image>"), tie_word_embeddings=True)
    processor = gemma3_processor(tok, vision_cfg["image_size"], TOKENS)
    return save_sensitive(out_dir, seed, Gemma3ForConditionalGeneration, config, processor, tok,
                          stop_tokens=("<eos>", "<end_of_turn>"), never_generate=("<image_soft_token>",))
