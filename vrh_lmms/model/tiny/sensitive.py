"""Tiny checkpoints whose answers depend on the image and on the heads.

A random model at the usual init (std 0.02) answers nearly the same on every image: attention is almost uniform,
and the residual stream of the answer position is dominated by its own token embedding. Here every weight matrix
(embeddings aside) is drawn with a larger std (`init_std`, scaled down for wide inputs), so attention logits spread
and what the answer position reads from the image outweighs its own embedding. Tests check the outcome (different
images -> different answers; ablating heads moves answers), not these numbers.
"""

from __future__ import annotations

from pathlib import Path

import torch

from vrh_lmms.model.tiny.common import save_checkpoint, seeded, set_generation_eos

INIT_STD = 0.25


def save_sensitive(out_dir: str | Path, seed: int, model_cls, config, processor, tokenizer, *,
                   init_std: float = INIT_STD, stop_tokens: tuple[str, ...] = (), pad_token: str | None = None,
                   never_generate: tuple[str, ...] = ()) -> Path:
    """Random-init `model_cls(config)` under `seed` with image- and head-sensitive weights, save it beside its
    processor and tokenizer. `never_generate`: tokens generation suppresses, as a trained model never emits them (an image placeholder in an
    answer would give a teacher-forced forward more placeholders than image features)."""
    with seeded(seed):
        model = model_cls(config).float().eval()  # float(): complex buffers (Llama 4 vision RoPE) stay complex
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() == 2 and "embed" not in name:
                    p.normal_(0.0, init_std / max(1.0, p.shape[1] / 64) ** 0.5)
    ids = tokenizer.convert_tokens_to_ids
    if stop_tokens:
        set_generation_eos(model, [ids(t) for t in stop_tokens], pad_id=ids(pad_token) if pad_token else None)
    if never_generate:
        model.generation_config.suppress_tokens = [ids(t) for t in never_generate]
    return save_checkpoint(out_dir, model, processor, tokenizer)
