"""Tiny random-weight Gemma 4 checkpoints (`Gemma4ForConditionalGeneration`).

Modelled on google/gemma-4-31B-it: Gemma 4's own vision tower (2-D RoPE, learned 2-D position table) on 16 px
patches of the image resized with its aspect ratio kept to at most `max_soft_tokens` x 3 x 3 patches, average-pooled
3 x 3 into soft tokens (so a variable number per image: 280 at most in lmms-eval's default, one per 48 x 48 px cell),
each image written as `<|image>` + soft tokens + `<image|>` in `<|turn>` / `<turn|>` chat turns; text with
sliding-window layers (bidirectional inside each image, `mm_token_type_ids`) and global layers whose heads are wider
(`global_head_dim`) and share fewer KV heads whose keys are also the values (`attention_k_eq_v`), as the published
checkpoint (256 / 512 head widths, 16 / 4 KV heads). The window is shorter than a tiny prompt, so it really cuts.

`unified=True` builds gemma-4-12B's architecture (`Gemma4UnifiedForConditionalGeneration`, model type
`gemma4_unified`): no vision tower, each 48 px cell's 3 x 3 patches merged and projected straight into one soft token
(layer norms, a dense layer, a factorized 2-D position table), the same resize, soft-token grid and text decoder.

The chat template renders what Gemma 4's published template renders for a system turn and a user turn of images then
text without thinking or tools (the published one is much longer: tools, thinking channels).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import (
    Gemma4AudioFeatureExtractor,
    Gemma4Config,
    Gemma4ForConditionalGeneration,
    Gemma4ImageProcessor,
    Gemma4Processor,
    Gemma4UnifiedAudioFeatureExtractor,
    Gemma4UnifiedConfig,
    Gemma4UnifiedForConditionalGeneration,
    Gemma4UnifiedImageProcessor,
    Gemma4UnifiedProcessor,
    Gemma4UnifiedVideoProcessor,
    Gemma4VideoProcessor,
)

from vrh_lmms.model.tiny.sensitive import save_sensitive
from vrh_lmms.model.tiny.vocab import build_tokenizer

NAMED = {"image_token": "<|image|>", "boi_token": "<|image>", "eoi_token": "<image|>", "audio_token": "<|audio|>",
         "boa_token": "<|audio>", "eoa_token": "<audio|>", "sot_token": "<|turn>", "eot_token": "<turn|>"}
SPECIALS = ("<pad>", "<eos>", "<bos>", "<mask>", *NAMED.values(), "<|video|>")
NEWLINE = "\n"
# google/gemma-4-31B-it's chat template for system / user / assistant turns of text and images (no tools, no thinking)
TEMPLATE = (
    "{{ bos_token }}{%- for message in messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<|turn>' + role + '\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] | trim }}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}{{ '<|image|>' }}"
    "{%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{ '<turn|>\n' }}{%- endfor -%}{%- if add_generation_prompt -%}{{ '<|turn>model\n' }}{%- endif -%}"
)
PATCH, POOL, SOFT_TOKENS = 16, 3, 70  # gemma-4: patch 16, pooled 3 x 3, 280 soft tokens (lmms-eval's default)
VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
          "num_key_value_heads": 2, "head_dim": 16, "patch_size": PATCH, "pooling_kernel_size": POOL,
          "position_embedding_size": 256}
# gemma-4-12B's encoder-free embedder (mm_embed_dim 3840 there, the text width)
UNIFIED_VISION = {"patch_size": PATCH, "pooling_kernel_size": POOL, "mm_embed_dim": 64, "output_proj_dims": 64,
                  "mm_posemb_size": 256}
# layer 0 slides over 16 tokens with 4 heads of 16 sharing 2 KV heads; layer 1 is global: 4 heads of 32 sharing one
# KV head whose keys are its values (gemma-4-31B: 5 sliding layers of 1024 per global one, heads 256 / 512 wide)
TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "global_head_dim": 32, "num_global_key_value_heads": 1,
        "attention_k_eq_v": True, "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 16,
        "use_bidirectional_attention": "vision", "hidden_size_per_layer_input": 0,
        "hidden_activation": "gelu_pytorch_tanh", "final_logit_softcapping": 30.0}


def _learned_positions(model, std: float = 1.0) -> None:
    """A position table drawn as a trained one differs per position (transformers initialises Gemma 4's to ones and
    the unified embedder's to zeros, which add the same vector to every patch)."""
    tower = getattr(model.model, "vision_tower", None)
    if tower is not None:
        tower.patch_embedder.position_embedding_table.normal_(0.0, std)
    else:
        model.model.embed_vision.pos_embedding.normal_(0.0, std)


def gemma4_processor(tokenizer, max_soft_tokens: int = SOFT_TOKENS, patch: int = PATCH, pool: int = POOL,
                     unified: bool = False):
    """Gemma 4's processor (gemma-4 checkpoints: patch 16, pooling 3, at most 280 soft tokens an image); `unified`:
    gemma-4-12B's (the same resize, patches merged 3 x 3 by the processor)."""
    image_cls, video_cls, audio_cls, cls = ((Gemma4UnifiedImageProcessor, Gemma4UnifiedVideoProcessor,
                                             Gemma4UnifiedAudioFeatureExtractor, Gemma4UnifiedProcessor) if unified
                                            else (Gemma4ImageProcessor, Gemma4VideoProcessor,
                                                  Gemma4AudioFeatureExtractor, Gemma4Processor))
    ip = image_cls(patch_size=patch, pooling_kernel_size=pool, max_soft_tokens=max_soft_tokens)
    video = video_cls(patch_size=patch, pooling_kernel_size=pool, max_soft_tokens=70)
    return cls(feature_extractor=audio_cls(), image_processor=ip, tokenizer=tokenizer, video_processor=video,
               chat_template=TEMPLATE, image_seq_length=max_soft_tokens)


def gemma4_tokenizer(extra_words: tuple[str, ...] = ()):
    return build_tokenizer(SPECIALS, plain_tokens=(NEWLINE,), extra_words=extra_words, named_specials=NAMED,
                           bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", chat_template=TEMPLATE,
                           padding_side="left")


def build(out_dir: str | Path, seed: int = 0, *, text: dict[str, Any] | None = None,
          vision: dict[str, Any] | None = None, extra_words: tuple[str, ...] = (), unified: bool = False) -> Path:
    """Write a complete tiny Gemma 4 checkpoint (config, weights, tokenizer, processor, template); `unified`:
    gemma-4-12B's encoder-free architecture."""
    tok = gemma4_tokenizer(extra_words)
    ids = tok.convert_tokens_to_ids
    text_cfg = {**TEXT, **(text or {}), "vocab_size": len(tok), "max_position_embeddings": 8192,
                "bos_token_id": ids("<bos>"), "eos_token_id": ids("<eos>"), "pad_token_id": ids("<pad>")}
    if unified:  # no per-layer input embeddings in gemma4_unified's text config
        text_cfg = {k: v for k, v in text_cfg.items() if k != "hidden_size_per_layer_input"}
        text_cfg["model_type"] = "gemma4_unified_text"
    else:
        text_cfg.update(model_type="gemma4_text", vocab_size_per_layer_input=len(tok))
    vision_cfg = {**(UNIFIED_VISION if unified else VISION), **(vision or {})}
    config_cls, model_cls = ((Gemma4UnifiedConfig, Gemma4UnifiedForConditionalGeneration) if unified
                             else (Gemma4Config, Gemma4ForConditionalGeneration))
    config = config_cls(text_config=text_cfg, vision_config=vision_cfg, audio_config=None,
                          image_token_id=ids("<|image|>"), boi_token_id=ids("<|image>"), eoi_token_id=ids("<image|>"),
                          video_token_id=ids("<|video|>"), audio_token_id=ids("<|audio|>"),
                          boa_token_id=ids("<|audio>"), eoa_token_index=ids("<audio|>"), tie_word_embeddings=True)
    processor = gemma4_processor(tok, patch=vision_cfg["patch_size"], pool=vision_cfg["pooling_kernel_size"],
                                 unified=unified)
    return save_sensitive(out_dir, seed, model_cls, config, processor, tok,
                          stop_tokens=("<eos>", "<turn|>"), never_generate=("<|image|>", "<|audio|>", "<|video|>"),
                          redraw=_learned_positions)
