"""Tiny random-weight Llama 4 checkpoints (`Llama4ForConditionalGeneration`).

Modelled on meta-llama/Llama-4-Scout-17B-16E-Instruct: a ViT with 2D RoPE on 336 px tiles (here 112), pixel shuffle
0.5 then an MLP adapter, images tiled onto the best-fitting canvas (aspect kept, padded right / bottom) with a
squashed global tile last when there are several, `<|patch|>` placeholders between `<|image_start|>` /
`<|tile_x_separator|>` / `<|tile_y_separator|>` / `<|image|>` / `<|image_end|>`; text with QK-norm, chunked local
attention on a RoPE layer and a global NoPE layer (the chunk is shorter than a tiny prompt, so it really cuts), a
dense and a mixture-of-experts layer (2 experts plus the shared one), and Llama 4's own chat template. Its
processor normalises in bfloat16, as the published one does: inputs for the float32 tiny model go through
`vrh_lmms.model.tiny.inputs.as_float32`, and `vrh_llama4` casts the pixels to the tower's dtype.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import Llama4Config, Llama4ForConditionalGeneration, Llama4ImageProcessor, Llama4Processor

from vrh_lmms.model.tiny.common import DEFAULT_TEXT
from vrh_lmms.model.tiny.sensitive import save_sensitive
from vrh_lmms.model.tiny.vocab import build_tokenizer

SPECIALS = ("<|begin_of_text|>", "<|end_of_text|>", "<|finetune_right_pad|>", "<|header_start|>", "<|header_end|>",
            "<|eot|>", "<|eom|>", "<|python_start|>", "<|python_end|>", "<|image_start|>", "<|image_end|>",
            "<|image|>", "<|patch|>", "<|tile_x_separator|>", "<|tile_y_separator|>")
NEWLINE = "\n"
TILE, PATCH = 112, 14  # Llama-4-Scout: 336 px tiles, patch 14 (24 x 24 patches, 12 x 12 tokens after the shuffle)
VISION = {"hidden_size": 32, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
          "image_size": TILE, "patch_size": PATCH, "pixel_shuffle_ratio": 0.5, "projector_input_dim": 64,
          "projector_output_dim": 64, "vision_output_dim": 64}  # intermediate = 4 x hidden (the shuffle)
# layer 0: global NoPE attention + dense MLP; layer 1: chunked RoPE attention + MoE (Scout: NoPE every 4th layer).
# The global layer comes first so the image reaches the answer's chunk.
TEXT = {"intermediate_size_mlp": 128, "no_rope_layers": [0, 1], "moe_layers": [1], "num_local_experts": 2,
        "num_experts_per_tok": 1, "attention_chunk_size": 16, "use_qk_norm": True}


def llama4_processor(tokenizer, tile: int = TILE, patch: int = PATCH, max_patches: int = 16):
    """Llama 4's processor (336 px tiles, patch 14, at most 16 tiles in the published checkpoint)."""
    ip = Llama4ImageProcessor(size={"height": tile, "width": tile}, max_patches=max_patches)
    return Llama4Processor(image_processor=ip, tokenizer=tokenizer, patch_size=patch, pixel_shuffle_ratio=0.5)


def build(out_dir: str | Path, seed: int = 0, *, text: dict[str, Any] | None = None,
          vision: dict[str, Any] | None = None, extra_words: tuple[str, ...] = ()) -> Path:
    """Write a complete tiny Llama 4 checkpoint (config, weights, tokenizer, processor, template)."""
    tok = build_tokenizer(SPECIALS, plain_tokens=(NEWLINE,), extra_words=extra_words,
                          named_specials={"image_token": "<|image|>"}, bos_token="<|begin_of_text|>",
                          eos_token="<|eot|>", pad_token="<|finetune_right_pad|>", padding_side="left")
    processor = llama4_processor(tok)
    tok.chat_template = processor.chat_template
    ids = tok.convert_tokens_to_ids
    text_cfg = {**DEFAULT_TEXT, **TEXT, **(text or {}), "vocab_size": len(tok), "max_position_embeddings": 8192,
                "bos_token_id": ids("<|begin_of_text|>"), "eos_token_id": [ids("<|end_of_text|>"), ids("<|eot|>")],
                "pad_token_id": ids("<|finetune_right_pad|>")}
    vision_cfg = {**VISION, **(vision or {})}
    config = Llama4Config(text_config=text_cfg, vision_config=vision_cfg, boi_token_index=ids("<|image_start|>"),
                          eoi_token_index=ids("<|image_end|>"), image_token_index=ids("<|patch|>"),
                          tie_word_embeddings=False)
    return save_sensitive(out_dir, seed, Llama4ForConditionalGeneration, config, processor, tok,
                          stop_tokens=("<|end_of_text|>", "<|eot|>"), pad_token="<|finetune_right_pad|>", init_std=0.15,
                          never_generate=("<|patch|>",))
