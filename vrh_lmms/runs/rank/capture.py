"""One multi-image forward -> every head's attention mass on each candidate image.

Inputs are built the way the chat `qwen2_5_vl` backend builds them (research.demo_model.data.backend_inputs: chat
template, qwen_vl_utils' image loading, the processor) with N images in one user turn, the query text before them
under `image_position=after_prompt` and after them otherwise. The query row is the last prompt token (the row that
emits the first answer token, after every image in either order); the capture is vrh_lmms.model.capture.attention with
one key set per candidate (its image-pad tokens, split per image by vrh_lmms.model.capture.multi_image, the same split
several-image discovery uses), so a head's mass on a candidate is the attention probability that row puts on the
candidate's tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from vrh_lmms.base.errors import VRHError

QUERY_ROW = "last prompt token"
FAMILY = "qwen2_5_vl"  # the ranker's prompts: Qwen2.5-VL's multi-image layout (vrh_qwen25)


def messages(text: str, images: Sequence[Any], text_first: bool) -> list[dict]:
    """One user turn holding every candidate image and the query text."""
    parts = [{"type": "image", "image": im} for im in images]
    content = [{"type": "text", "text": text}, *parts] if text_first else [*parts, {"type": "text", "text": text}]
    return [{"role": "user", "content": content}]


def multi_image_inputs(processor, text: str, images: Sequence[Any], text_first: bool):
    """Processor outputs (batch of one) for the query over the candidates."""
    # deferred: keeps `vrh-lmms rank-train --help` free of qwen_vl_utils
    from qwen_vl_utils import process_vision_info

    conv = messages(text, images, text_first)
    prompt = processor.apply_chat_template([conv], tokenize=False, add_generation_prompt=True)
    loaded, _ = process_vision_info([conv])
    return processor(text=prompt, images=loaded, return_tensors="pt")


def checked_spans(processor, inputs) -> list[np.ndarray]:
    """Candidate spans, checked against the processor's own count of each image's tokens (image_grid_thw)."""
    # deferred: keeps `vrh-lmms rank-train --help` free of transformers
    from vrh_lmms.model.capture.extras import layout_extras
    from vrh_lmms.model.capture.multi_image import image_spans

    token = layout_extras(FAMILY, processor, inputs, 0)["image_token_id"]
    spans = [s.placeholders.numpy() for s in image_spans(FAMILY, inputs["input_ids"][0], processor.tokenizer, token)]
    grid = inputs.get("image_grid_thw")
    merge = getattr(processor.image_processor, "merge_size", 2)
    if grid is not None:
        expected = [int(torch.prod(g)) // merge**2 for g in grid]
        if expected != [s.size for s in spans]:
            raise VRHError(f"image spans hold {[s.size for s in spans]} tokens, image_grid_thw says {expected}")
    return spans


def candidate_mass(model: torch.nn.Module, inputs: dict[str, torch.Tensor], spans: Sequence[np.ndarray],
                   base: str | None = None) -> np.ndarray:
    """(layers, heads, n_candidates) float64: each head's attention from the last prompt row to each span."""
    # deferred: keeps `vrh-lmms rank-train --help` free of transformers
    from vrh_lmms.model.capture.attention import CapturePlan, capture_attention

    seq_len = int(inputs["input_ids"].shape[1])
    keys = {}
    for i, pos in enumerate(spans):
        mask = torch.zeros(1, seq_len, dtype=torch.bool)
        mask[0, torch.as_tensor(pos, dtype=torch.long)] = True
        keys[str(i)] = mask
    plan = CapturePlan(query_positions=torch.tensor([[seq_len - 1]], dtype=torch.long), key_sets=keys, argmax=False)
    device = next(model.parameters()).device
    moved = {k: v.to(device) if hasattr(v, "to") else v for k, v in inputs.items()}
    with torch.no_grad(), capture_attention(model, plan, base=base) as handle:
        model(**moved)
    mass = handle.result().mass
    return torch.stack([mass[str(i)][0, :, :, 0] for i in range(len(spans))], dim=-1).double().cpu().numpy()
