"""Tiny random-weight LLaVA-OneVision-1.5 checkpoints of the real transformers class
(`LlavaOnevision15ForConditionalGeneration`, model type `llava_onevision1_5`; transformers 5.25 and later).

Modelled on Deep-VLM/LLaVA-OneVision-1.5-*-Instruct-hf: a RICE-ViT vision tower (14 px patches embedded by a 2-D
convolution, one temporal frame per patch, a class token per image, 2 x 2 patch merger) and a Qwen3 text decoder
(GQA with q/k norms, plain 1-D RoPE: the class generates with default positions, not M-RoPE). The processor is what
AutoProcessor builds for this model type (`Exaone4_5_Processor` around `Qwen2VLImageProcessor`: 28 px merged cells,
`temporal_patch_size=1`, CLIP's mean and std), with the Qwen2-VL chat template (`<|vision_start|>` + one
`<|image_pad|>` per cell + `<|vision_end|>`). Weights are drawn image- and head-sensitive (tiny/sensitive.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import Qwen2VLImageProcessor, Qwen2VLVideoProcessor
from transformers.models.exaone4_5 import Exaone4_5_Processor
from transformers.models.llava_onevision1_5 import LlavaOnevision15Config, LlavaOnevision15ForConditionalGeneration

from vrh_lmms.model.tiny.common import DEFAULT_TEXT
from vrh_lmms.model.tiny.qwen2_5_vl import make_tokenizer
from vrh_lmms.model.tiny.sensitive import save_sensitive

VISION = {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": 14,
          "spatial_merge_size": 2}
# the published image processor: 14 px patches merged 2 x 2, one frame per patch (the tower's patch embedding is a
# 2-D convolution), CLIP normalisation; pixel bounds are lmms-eval's llava_onevision1_5 backend defaults scaled down
# for tests (published: 256 to 2048 cells of 28 px, PUBLISHED_PIXELS in the family tests)
PROCESSOR = {"patch_size": 14, "merge_size": 2, "temporal_patch_size": 1,
             "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711]}
MIN_PIXELS, MAX_PIXELS = 28 * 28 * 4, 28 * 28 * 256


def make_processor(tokenizer, *, min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS):
    """The processor AutoProcessor builds for llava_onevision1_5 around the tiny tokenizer."""
    size = {"shortest_edge": min_pixels, "longest_edge": max_pixels}
    image_processor = Qwen2VLImageProcessor(size=size, **PROCESSOR)
    video_processor = Qwen2VLVideoProcessor(size={**size, "longest_edge": max_pixels * 4}, **PROCESSOR)
    return Exaone4_5_Processor(image_processor=image_processor, tokenizer=tokenizer,
                               video_processor=video_processor, chat_template=tokenizer.chat_template)


def build(out_dir: str | Path, seed: int = 0, *, text: dict[str, Any] | None = None,
          vision: dict[str, Any] | None = None, extra_words: tuple[str, ...] = (),
          processor_kwargs: dict[str, Any] | None = None) -> Path:
    """Write a complete tiny LLaVA-OneVision-1.5 checkpoint (config, weights, tokenizer, processor, template)."""
    tok = make_tokenizer(extra_words)
    ids = tok.convert_tokens_to_ids
    text_cfg = {**DEFAULT_TEXT, **(text or {}), "model_type": "qwen3", "vocab_size": len(tok),
                "max_position_embeddings": 4096, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
                "bos_token_id": ids("<|endoftext|>"), "eos_token_id": ids("<|im_end|>"),
                "pad_token_id": ids("<|endoftext|>")}
    vision_cfg = {**VISION, **(vision or {}), "out_hidden_size": text_cfg["hidden_size"]}
    config = LlavaOnevision15Config(text_config=text_cfg, vision_config=vision_cfg,
                                    image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
                                    vision_start_token_id=ids("<|vision_start|>"),
                                    vision_end_token_id=ids("<|vision_end|>"), tie_word_embeddings=False)
    processor = make_processor(tok, **(processor_kwargs or {}))
    return save_sensitive(out_dir, seed, LlavaOnevision15ForConditionalGeneration, config, processor, tok,
                          projector="model.visual.merger", stop_tokens=("<|im_end|>",), pad_token="<|endoftext|>",
                          never_generate=("<|image_pad|>", "<|video_pad|>"))
