"""Tiny random-weight Qwen2.5-Omni checkpoints of the real transformers class (the one lmms-eval's backend loads).

`Qwen2_5OmniForConditionalGeneration` with a tiny thinker (text decoder, vision tower, audio tower) and no talker
(`enable_audio_output=False`: the backend disables the talker anyway, and text answers never touch it). The
checkpoint also carries `spk_dict.pt`, which the class's `from_pretrained` requires and whose speaker "Chelsie" its
`generate` checks. Audio settings are the real checkpoint's (WhisperFeatureExtractor: 128 mel bins, 16 kHz, hop 160,
chunk_length 300; audio encoder n_window 100), so layouts computed on the tiny model hold at real geometry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import (
    Qwen2_5OmniConfig,
    Qwen2_5OmniForConditionalGeneration,
    Qwen2_5OmniProcessor,
    Qwen2VLImageProcessor,
    Qwen2VLVideoProcessor,
    WhisperFeatureExtractor,
)

from vrh_lmms.model.tiny.common import DEFAULT_TEXT, chat_template, init_and_save
from vrh_lmms.model.tiny.vocab import build_tokenizer

# Qwen2.5-Omni's special tokens, in the order of its tokenizer (151643 ...): the thinker config's default ids
# (audio 151646, audio_bos 151647, audio_eos 151648, image 151655, video 151656) follow the same order.
SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|AUDIO|>",
    "<|audio_bos|>",
    "<|audio_eos|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_bos|>",
    "<|vision_eos|>",
    "<|vision_pad|>",
    "<|IMAGE|>",
    "<|VIDEO|>",
)

# Qwen2.5-Omni's chat template (audio, image and video content parts; system prompt added when missing).
CHAT_TEMPLATE = chat_template("qwen2_5_omni")

# Words of the backend's default system prompt and of the audio needle task, so prompts tokenize without <unk>.
EXTRA_WORDS = tuple(
    """qwen virtual developed team alibaba group capable perceiving auditory visual inputs as well generating text
    speech audio clip tone tones code codes heard hear listen played spoken value second seconds high low beep beeps
    hum""".split()
)

DEFAULT_VISION = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=14,
                      spatial_merge_size=2, temporal_patch_size=2, window_size=112, fullatt_block_indexes=[1])
# Real Qwen2.5-Omni-7B audio settings where they shape the layout (128 mel bins, chunks of 2 * n_window frames).
DEFAULT_AUDIO = dict(num_mel_bins=128, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=64, d_model=32,
                     n_window=100, max_source_positions=1500)
# Qwen2.5-Omni-7B's preprocessor_config.json audio part (WhisperFeatureExtractor).
REAL_FEATURE_EXTRACTOR = dict(feature_size=128, sampling_rate=16000, hop_length=160, chunk_length=300, n_fft=400, dither=0.0,
                              padding_value=0.0, return_attention_mask=True)
SPEAKER = "Chelsie"


def make_tokenizer(extra_words: tuple[str, ...] = ()):
    return build_tokenizer(
        SPECIALS,
        extra_words=EXTRA_WORDS + tuple(extra_words),
        named_specials={"image_token": "<|IMAGE|>", "video_token": "<|VIDEO|>", "audio_token": "<|AUDIO|>",
                        "vision_bos_token": "<|vision_bos|>", "vision_eos_token": "<|vision_eos|>",
                        "audio_bos_token": "<|audio_bos|>", "audio_eos_token": "<|audio_eos|>"},
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    )


def make_processor(tokenizer, *, min_pixels: int = 28 * 28 * 4, max_pixels: int = 28 * 28 * 256,
                   feature_extractor: dict[str, Any] | None = None):
    image_processor = Qwen2VLImageProcessor(patch_size=14, merge_size=2, temporal_patch_size=2,
                                            min_pixels=min_pixels, max_pixels=max_pixels)
    video_processor = Qwen2VLVideoProcessor(patch_size=14, merge_size=2, temporal_patch_size=2,
                                            min_pixels=min_pixels, max_pixels=max_pixels)
    fe = WhisperFeatureExtractor(**{**REAL_FEATURE_EXTRACTOR, **(feature_extractor or {})})
    return Qwen2_5OmniProcessor(image_processor=image_processor, video_processor=video_processor,
                                feature_extractor=fe, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE)


def make_config(tokenizer, text: dict[str, Any] | None = None, vision: dict[str, Any] | None = None,
                audio: dict[str, Any] | None = None, initializer_range: float = 0.02):
    text_cfg = {**DEFAULT_TEXT, **(text or {})}
    half = text_cfg["head_dim"] // 2
    ids = tokenizer.convert_tokens_to_ids
    text_cfg.update(vocab_size=len(tokenizer), max_position_embeddings=4096, initializer_range=initializer_range,
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                     "mrope_section": [half - 2 * (half // 3), half // 3, half // 3]},
                    bos_token_id=ids("<|endoftext|>"), eos_token_id=ids("<|im_end|>"),
                    pad_token_id=ids("<|endoftext|>"), tie_word_embeddings=False)
    vision_cfg = {**DEFAULT_VISION, **(vision or {}), "out_hidden_size": text_cfg["hidden_size"],
                  "initializer_range": initializer_range}
    audio_cfg = {**DEFAULT_AUDIO, **(audio or {}), "output_dim": text_cfg["hidden_size"],
                 "initializer_range": initializer_range}
    thinker = dict(text_config=text_cfg, vision_config=vision_cfg, audio_config=audio_cfg,
                   audio_token_index=ids("<|AUDIO|>"), image_token_index=ids("<|IMAGE|>"),
                   video_token_index=ids("<|VIDEO|>"), audio_start_token_id=ids("<|audio_bos|>"),
                   audio_end_token_id=ids("<|audio_eos|>"), vision_start_token_id=ids("<|vision_bos|>"),
                   vision_end_token_id=ids("<|vision_eos|>"), user_token_id=ids("user"),
                   bos_token_id=ids("<|endoftext|>"), eos_token_id=ids("<|im_end|>"),
                   pad_token_id=ids("<|endoftext|>"), position_id_per_seconds=25, seconds_per_chunk=2,
                   initializer_range=initializer_range)
    # the talker is never built (enable_audio_output=False); its token ids must still name tiny-vocabulary tokens
    talker = dict(vocab_size=64, audio_token_index=ids("<|AUDIO|>"), image_token_index=ids("<|IMAGE|>"),
                  video_token_index=ids("<|VIDEO|>"), audio_start_token_id=ids("<|audio_bos|>"),
                  audio_end_token_id=ids("<|audio_eos|>"), vision_start_token_id=ids("<|vision_bos|>"),
                  vision_end_token_id=ids("<|vision_eos|>"), tts_text_start_token_id=ids("<|endoftext|>"),
                  tts_text_end_token_id=ids("<|endoftext|>"), tts_text_pad_token_id=ids("<|endoftext|>"),
                  tts_codec_start_token_id=1, tts_codec_end_token_id=2, tts_codec_pad_token_id=3,
                  tts_codec_mask_token_id=4)
    return Qwen2_5OmniConfig(thinker_config=thinker, talker_config=talker, enable_audio_output=False)


def build(out_dir: str | Path, seed: int = 0, *, text: dict[str, Any] | None = None,
          vision: dict[str, Any] | None = None, audio: dict[str, Any] | None = None,
          initializer_range: float = 0.02, extra_words: tuple[str, ...] = (),
          processor_kwargs: dict[str, Any] | None = None) -> Path:
    """Write a complete tiny Qwen2.5-Omni checkpoint (config, weights, tokenizer, processor, template, speakers)."""
    tokenizer = make_tokenizer(extra_words)
    config = make_config(tokenizer, text, vision, audio, initializer_range)
    processor = make_processor(tokenizer, **(processor_kwargs or {}))
    out = init_and_save(out_dir, seed, Qwen2_5OmniForConditionalGeneration, config, processor, tokenizer)
    # from_pretrained loads spk_dict.pt unconditionally; text generation reads only the speaker's name
    torch.save({SPEAKER: {"bos_token": tokenizer.convert_tokens_to_ids("<|endoftext|>")}}, out / "spk_dict.pt")
    return out
