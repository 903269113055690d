"""A tiny checkpoint of a model type no vrh-lmms family claims (VipLLaVA), for what runs it through `vrh_hf`.

The model is transformers' own class on the generic shrunk config (vrh_lmms.model.tiny.generic.tiny_config), its
vision tower set to the tiny LLaVA processor's 112 px crop and its image token to that tokenizer's `<image>`; the
processor, tokenizer and chat template are the tiny LLaVA checkpoint's (VipLLaVA uses LLaVA's processor class).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from vrh_lmms.model.generic import model_class_for
from vrh_lmms.model.tiny.common import seeded
from vrh_lmms.model.tiny.generic import tiny_config

MODEL_TYPE = "vipllava"
PROCESSOR_FILES = ("processor_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def build(out_dir: str | Path, llava_dir: str | Path, seed: int = 0) -> Path:
    """Write the checkpoint into `out_dir`, taking the processor files of the tiny LLaVA checkpoint `llava_dir`."""
    out, llava = Path(out_dir), Path(llava_dir)
    config = tiny_config(MODEL_TYPE)
    config.vision_config.image_size = 112  # the tiny LLaVA processor's crop: 8 x 8 patches of 14 px
    config.image_token_id = 3  # `<image>` in the tiny LLaVA tokenizer
    with seeded(seed):
        model = model_class_for(config)._from_config(config, dtype=torch.float32).eval()
    model.save_pretrained(out)
    for name in PROCESSOR_FILES:
        shutil.copyfile(llava / name, out / name)
    return out
