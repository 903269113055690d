"""Tiny random-weight PaliGemma2 checkpoints: `PaliGemmaForConditionalGeneration` with Gemma2 text.

Structurally real: SigLIP vision tower and linear projector, image tokens first then `<bos>` + prompt + `\\n` with a
bidirectional prefix, Gemma2 text with GQA, attention and final-logit soft-capping, alternating sliding-window /
global layers (the window is shorter than a tiny prompt, so it really cuts) and `query_pre_attn_scalar`. The
vocabulary holds the 1024 `<locNNNN>` and 128 `<segNNN>` tokens, kept by decoding as in the real tokenizer.
PaliGemma2 "pt" checkpoints ship no chat template, so none is written.
"""

from __future__ import annotations

from typing import Any

from transformers import PaliGemmaConfig, PaliGemmaForConditionalGeneration, PaliGemmaProcessor, SiglipImageProcessor

from vrh_lmms.model.tiny.common import DEFAULT_TEXT, TinyFamily
from vrh_lmms.model.tiny.vocab import build_tokenizer

SPECIALS = ("<pad>", "<eos>", "<bos>", "<mask>", "<start_of_turn>", "<end_of_turn>", "<image>")
LOC_TOKENS = tuple(f"<loc{i:04d}>" for i in range(1024))
SEG_TOKENS = tuple(f"<seg{i:03d}>" for i in range(128))
# The processor ends every prefix with "\n" (the separator before the answer); keep it a token, not whitespace.
NEWLINE = "\n"
# PaliGemma task prefixes, so prompts like "detect red circle" tokenize to known words.
TASK_WORDS = ("detect", "segment", "caption", "answer", "en", "ocr", "point")

IMAGE_SIZE = 112  # 224 in paligemma2-3b-pt-224
PATCH = 14
DEFAULT_VISION = {"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64,
                  "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": IMAGE_SIZE, "patch_size": PATCH,
                  "vision_use_head": False}
# Gemma2: even layers slide, odd layers are global; logits soft-capped at 50 in attention and 30 at the output.
GEMMA2 = {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 32, "attn_logit_softcapping": 50.0,
          "final_logit_softcapping": 30.0, "hidden_activation": "gelu_pytorch_tanh"}


def num_image_tokens(vision: dict[str, Any] | None = None) -> int:
    v = {**DEFAULT_VISION, **(vision or {})}
    return (v["image_size"] // v["patch_size"]) ** 2


def make_tokenizer(extra_words: tuple[str, ...] = ()):
    return build_tokenizer(
        SPECIALS,
        plain_tokens=(NEWLINE, *LOC_TOKENS, *SEG_TOKENS),
        extra_words=TASK_WORDS + tuple(extra_words),
        named_specials={"image_token": "<image>"},
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        model_max_length=8192,
    )


def make_processor(tokenizer, vision: dict[str, Any] | None = None):
    v = {**DEFAULT_VISION, **(vision or {})}
    image_processor = SiglipImageProcessor(size={"height": v["image_size"], "width": v["image_size"]},
                                           image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
                                           image_seq_length=num_image_tokens(vision))
    return PaliGemmaProcessor(image_processor=image_processor, tokenizer=tokenizer)


def make_config(tokenizer, text: dict[str, Any] | None = None, vision: dict[str, Any] | None = None,
                initializer_range: float = 0.02):
    text_cfg = {**DEFAULT_TEXT, **GEMMA2, **(text or {})}
    ids = tokenizer.convert_tokens_to_ids
    text_cfg.update(model_type="gemma2", vocab_size=len(tokenizer), max_position_embeddings=8192,
                    query_pre_attn_scalar=text_cfg["head_dim"],
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                    bos_token_id=ids("<bos>"), eos_token_id=ids("<eos>"), pad_token_id=ids("<pad>"),
                    initializer_range=initializer_range)
    vision_cfg = {**DEFAULT_VISION, **(vision or {}), "initializer_range": initializer_range}
    return PaliGemmaConfig(
        text_config=text_cfg,
        vision_config=vision_cfg,
        image_token_index=ids("<image>"),
        vocab_size=len(tokenizer),
        projection_dim=text_cfg["hidden_size"],
        hidden_size=text_cfg["hidden_size"],
        tie_word_embeddings=True,
    )


# the factory: a complete tiny PaliGemma2 checkpoint (config, weights, tokenizer, processor, template)
FAMILY = TinyFamily("PaliGemma2", PaliGemmaForConditionalGeneration,
                     make_tokenizer, make_config, make_processor)
build = FAMILY.build
