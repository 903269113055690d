"""Tiny checkpoints whose answers depend on the image and on the heads.

A random model at the usual init (std 0.02) answers nearly the same on every image: attention is almost uniform,
and the residual stream of the answer position is dominated by its own token embedding. Here every weight matrix
(embeddings aside) is drawn with a larger std (`init_std`, scaled down for wide inputs), so attention logits spread
and what the answer position reads from the image outweighs its own embedding. Tests check the outcome (different
images -> different answers; ablating heads moves answers), not these numbers.
`projector_gain` scales the multimodal projector, so image features are not washed out by the text around them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from vrh_lmms.model.tiny.common import save_checkpoint, seeded, set_generation_eos

INIT_STD = 0.25


def _get(model, path: str):
    for part in path.split("."):
        model = getattr(model, part)
    return model


def save_sensitive(out_dir: str | Path, seed: int, model_cls, config, processor, tokenizer, *,
                   projector: str | None = None, init_std: float = INIT_STD, projector_gain: float = 1.0,
                   stop_tokens: tuple[str, ...] = (), pad_token: str | None = None,
                   never_generate: tuple[str, ...] = (),
                   redraw: Callable[[torch.nn.Module], None] | None = None) -> Path:
    """Random-init `model_cls(config)` under `seed` with image- and head-sensitive weights, save it beside its
    processor and tokenizer. `projector`: dotted path of the multimodal projector, scaled by `projector_gain`.
    `never_generate`: tokens generation suppresses, as a trained model never emits them (an image placeholder in
    an answer would give a teacher-forced forward more placeholders than image features). `redraw`: run on the model
    under the same seed after the draw, for weights the draw does not reach (Gemma 4's vision position table, all ones
    at init, would hide the image's content from the tower)."""
    with seeded(seed):
        model = model_cls(config).float().eval()  # float(): complex buffers (Llama 4 vision RoPE) stay complex
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() == 2 and "embed" not in name:
                    p.normal_(0.0, init_std / max(1.0, p.shape[1] / 64) ** 0.5)
            if projector is not None and projector_gain != 1.0:
                for p in _get(model, projector).parameters():
                    p.mul_(projector_gain)
            if redraw is not None:
                redraw(model)
    ids = tokenizer.convert_tokens_to_ids
    if stop_tokens:
        set_generation_eos(model, [ids(t) for t in stop_tokens], pad_id=ids(pad_token) if pad_token else None)
    if never_generate:
        model.generation_config.suppress_tokens = [ids(t) for t in never_generate]
    return save_checkpoint(out_dir, model, processor, tokenizer)
