"""A tiny random-weight Gemma 3 checkpoint with its real processor classes, for the `vrh_hf` end-to-end tests.

`Gemma3ForConditionalGeneration` on a SigLIP tower (56 px, 4 x 4 patches pooled to 4 image tokens), Gemma 3 text
with 6 layers (five sliding-window, the sixth global, as the real pattern), `Gemma3Processor` with a word-level
tokenizer holding Gemma's turn and image tokens, and Gemma 3's chat template (images as `<start_of_image>`).
The family's own builder (discovery-ready, image-dependent answers) is vrh_lmms.model.tiny's; this one only needs
to be a real, loadable Gemma 3 checkpoint.
"""

from __future__ import annotations

from pathlib import Path

from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3ImageProcessor, Gemma3Processor

from vrh_lmms.model.tiny.common import init_and_save
from vrh_lmms.model.tiny.vocab import build_tokenizer

SPECIALS = ("<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>",
            "<image_soft_token>")
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] | trim }}{% else %}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}{{ '<start_of_image>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] | trim }}{% endif %}{% endfor %}{% endif %}"
    "{{ '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)
IMAGE, PATCH, TOKENS = 56, 14, 4


def build(out_dir: str | Path, seed: int = 0, **text_overrides) -> Path:
    """Write the checkpoint; `text_overrides` change the text config (the benchmark's larger shape)."""
    tok = build_tokenizer(SPECIALS, plain_tokens=("\n",), extra_words=("user", "model", "system"),
                          named_specials={"image_token": "<image_soft_token>", "boi_token": "<start_of_image>",
                                          "eoi_token": "<end_of_image>"},
                          bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", chat_template=CHAT_TEMPLATE)
    ids = tok.convert_tokens_to_ids
    image_processor = Gemma3ImageProcessor(size={"height": IMAGE, "width": IMAGE}, image_mean=[0.5] * 3,
                                           image_std=[0.5] * 3)
    processor = Gemma3Processor(image_processor=image_processor, tokenizer=tok, chat_template=CHAT_TEMPLATE,
                                image_seq_length=TOKENS)
    text = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 6, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "vocab_size": len(tok), "sliding_window": 8,
            "layer_types": ["sliding_attention"] * 5 + ["full_attention"], "query_pre_attn_scalar": 16,
            "bos_token_id": ids("<bos>"), "eos_token_id": ids("<eos>"), "pad_token_id": ids("<pad>"),
            "initializer_range": 0.2, **text_overrides}
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
              "image_size": IMAGE, "patch_size": PATCH, "vision_use_head": False}
    config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=TOKENS,
                          boi_token_index=ids("<start_of_image>"), eoi_token_index=ids("<end_of_image>"),
                          image_token_index=ids("<image_soft_token>"), initializer_range=0.2)
    return init_and_save(out_dir, seed, Gemma3ForConditionalGeneration, config, processor, tok,
                         stop_tokens=("<eos>", "<end_of_turn>"), pad_token="<pad>")
