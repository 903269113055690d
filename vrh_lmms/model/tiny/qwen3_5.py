"""Tiny random-weight Qwen3.5 checkpoints: dense (`Qwen3_5ForConditionalGeneration`) and MoE
(`Qwen3_5MoeForConditionalGeneration`, `moe=True`).

Modelled on Qwen/Qwen3.5-*: Qwen3-VL's vision tower (16 px patches merged 2 x 2 into 32 px cells, learned position
embeddings, no DeepStack) and processor (`Qwen3VLProcessor` with `Qwen2VLImageProcessor`); a hybrid text decoder
whose layers are Gated DeltaNet linear attention (no softmax heads) except every `full_attention_interval`-th one,
which is gated softmax attention with QK-norm and partial interleaved M-RoPE. The published decoders put a
full-attention layer every 4th layer (3 linear, then 1 full); the tiny one keeps the pattern at interval 2 over 4
layers (linear, full, linear, full), so head indices are real decoder layer indices (L1, L3) and a linear layer
comes first. The MoE text replaces every MLP by routed experts plus a gated shared expert (2 of 4 experts here).
The chat template is Qwen3-VL's with Qwen3.5's thinking switch at the generation prompt (`enable_thinking`, on by
default: `<think>\\n` opens the answer; off: an empty `<think>\\n\\n</think>\\n\\n` block); the published template
was not available offline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenizers import AddedToken
from tokenizers.pre_tokenizers import ByteLevel
from transformers import (
    Qwen3_5Config,
    Qwen3_5ForConditionalGeneration,
    Qwen3_5MoeConfig,
    Qwen3_5MoeForConditionalGeneration,
    Qwen3_5Tokenizer,
)

from vrh_lmms.model.tiny.common import DEFAULT_TEXT, chat_template
from vrh_lmms.model.tiny.qwen3_vl import PLAIN, SPECIALS, make_processor
from vrh_lmms.model.tiny.sensitive import save_sensitive
from vrh_lmms.model.tiny.vocab import BASE_WORDS

VISION = {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": 16,
          "spatial_merge_size": 2, "temporal_patch_size": 2, "num_position_embeddings": 64}
# 4 layers, a full-attention layer every 2nd (published: every 4th); Gated DeltaNet heads of the linear layers
TEXT = {"num_hidden_layers": 4, "layer_types": ["linear_attention", "full_attention"] * 2,
        "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
        "linear_conv_kernel_dim": 4}
MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32}
# partial rotary (published 0.25 of 256; here 0.5 of 16 = 8 dims, 4 frequencies split t/h/w 2/1/1, interleaved)
ROPE = {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.5, "mrope_section": [2, 1, 1],
        "mrope_interleaved": True}
CHAT_TEMPLATE = chat_template("qwen3_5")


NAMED = {"image_token": "<|image_pad|>", "video_token": "<|video_pad|>", "vision_bos_token": "<|vision_start|>",
         "vision_eos_token": "<|vision_end|>"}


def _apply_merges(pieces: list[str], ranks: dict[tuple[str, str], int]) -> list[str]:
    """Byte-pair encoding of one pre-token: merge the adjacent pair of lowest rank until none applies."""
    while len(pieces) > 1:
        pairs = [(ranks.get((a, b)), i) for i, (a, b) in enumerate(zip(pieces, pieces[1:]))]
        best = min((p for p in pairs if p[0] is not None), default=None)
        if best is None:
            break
        i = best[1]
        pieces = [*pieces[:i], pieces[i] + pieces[i + 1], *pieces[i + 2:]]
    return pieces


def byte_level_bpe(words: list[str]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Vocabulary and merges of a byte-level BPE that spells each of `words` (byte-level strings) as one token: the
    256 byte symbols, then, word by word (short ones first), the merges that join what the earlier merges leave of it,
    ranked after them, so no earlier word's spelling changes. Any other text falls back to smaller pieces."""
    vocab = {c: i for i, c in enumerate(sorted(ByteLevel.alphabet()))}
    merges: list[tuple[str, str]] = []
    ranks: dict[tuple[str, str], int] = {}
    for word in sorted(set(words), key=lambda w: (len(w), w)):
        pieces = _apply_merges(list(word), ranks)
        while len(pieces) > 1:
            pair = (pieces[0], pieces[1])
            ranks[pair] = len(merges)
            merges.append(pair)
            vocab.setdefault(pair[0] + pair[1], len(vocab))
            pieces = [pair[0] + pair[1], *pieces[2:]]
    return vocab, merges


def qwen3_5_tokenizer(extra_words: tuple[str, ...] = ()):
    """A real `Qwen3_5Tokenizer` (byte-level BPE with Qwen's pre-tokenizer: what AutoTokenizer builds for every
    qwen3_5 checkpoint, whatever its tokenizer_config says), over a small vocabulary: bytes, single digits (as
    Qwen splits numbers), our prompt words with and without a leading space and capital, Qwen3-VL's special tokens
    and its plain `<think>` / `<tool_call>` tokens."""
    spell = ByteLevel(add_prefix_space=False, use_regex=False)
    words = [w for base in (*BASE_WORDS, *extra_words)
             for w in (base, base.capitalize(), f" {base}", f" {base.capitalize()}")]
    vocab, merges = byte_level_bpe(["".join(t for t, _ in spell.pre_tokenize_str(w)) for w in words])
    tok = Qwen3_5Tokenizer(vocab=vocab, merges=merges, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                           unk_token=None, extra_special_tokens=dict(NAMED), padding_side="left")
    tok.add_special_tokens({"additional_special_tokens": [t for t in SPECIALS if t not in (tok.eos_token,
                                                                                          tok.pad_token)]},
                           replace_extra_special_tokens=False)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in PLAIN])
    tok.chat_template = CHAT_TEMPLATE
    return tok


def qwen3_5_processor(tokenizer, **kwargs):
    """Qwen3.5's processor: Qwen3-VL's (16 px patches, 2 x 2 merge, mean = std = 0.5) with its chat template."""
    processor = make_processor(tokenizer, **kwargs)
    processor.chat_template = CHAT_TEMPLATE
    return processor


def build(out_dir: str | Path, seed: int = 0, *, moe: bool = False, text: dict[str, Any] | None = None,
          vision: dict[str, Any] | None = None, extra_words: tuple[str, ...] = (),
          processor_kwargs: dict[str, Any] | None = None) -> Path:
    """Write a complete tiny Qwen3.5 checkpoint (config, weights, tokenizer, processor, template); `moe=True`: the
    Qwen3.5-MoE classes (model_type qwen3_5_moe)."""
    tok = qwen3_5_tokenizer(extra_words)
    ids = tok.convert_tokens_to_ids
    text_cfg = {**DEFAULT_TEXT, **TEXT, **(MOE if moe else {}), **(text or {}), "vocab_size": len(tok),
                "max_position_embeddings": 4096, "rope_parameters": dict(ROPE), "bos_token_id": ids("<|endoftext|>"),
                "eos_token_id": ids("<|im_end|>")}  # no pad id: its embedding is not zeroed, as in a trained model,
    # so left padding reaches the linear-attention layers unless their padding mask holds it back
    vision_cfg = {**VISION, **(vision or {}), "out_hidden_size": text_cfg["hidden_size"]}
    config_cls, model_cls = ((Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration) if moe
                             else (Qwen3_5Config, Qwen3_5ForConditionalGeneration))
    config = config_cls(text_config=text_cfg, vision_config=vision_cfg, image_token_id=ids("<|image_pad|>"),
                        video_token_id=ids("<|video_pad|>"), vision_start_token_id=ids("<|vision_start|>"),
                        vision_end_token_id=ids("<|vision_end|>"), tie_word_embeddings=False)
    processor = qwen3_5_processor(tok, **(processor_kwargs or {}))
    return save_sensitive(out_dir, seed, model_cls, config, processor, tok, stop_tokens=("<|im_end|>",),
                          pad_token="<|endoftext|>", never_generate=("<|image_pad|>", "<|video_pad|>"))


def build_moe(out_dir: str | Path, seed: int = 0, **overrides) -> Path:
    """A tiny Qwen3.5-MoE checkpoint (`build(..., moe=True)`): the factory of family `qwen3_5_moe`."""
    return build(out_dir, seed, moe=True, **overrides)
