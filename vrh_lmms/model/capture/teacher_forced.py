"""Teacher-forced inputs: the backend's own generate inputs extended by an answer, for one full forward.

Shared by discovery (its captured rows), attention maps and activation patching; on the model floor, since it only
rearranges tensors.
"""

from __future__ import annotations

import torch

from vrh_lmms.base.errors import VRHError

# How each per-token input continues over the answer tokens in a teacher-forced forward.
SEQUENCE_FILL = {"attention_mask": 1, "token_type_ids": 1, "mm_token_type_ids": 0}
DROP = {"position_ids", "cache_position", "labels"}  # no loss is computed; positions are rebuilt


def _image_flags(inputs: dict[str, torch.Tensor]) -> torch.Tensor | None:
    """InternVLChatModel.forward keeps the features of tiles flagged 1 (`vit_embeds[image_flags == 1]`); its
    generate, which the backend calls, uses every tile, so the teacher-forced forward flags every tile."""
    pixels = inputs.get("pixel_values")
    return None if pixels is None else torch.ones(pixels.shape[0], 1, dtype=torch.long, device=pixels.device)


# Forward inputs a family's generate does without, by the name the family table gives (Family.forward_fills).
FORWARD_FILLS = {"image_flags": _image_flags}


def teacher_forced_inputs(tensors: dict[str, torch.Tensor], answer: torch.Tensor,
                          fills: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    """The generate inputs extended by `answer` (1-D ids): one full forward over prompt + answer.

    fills: names in FORWARD_FILLS of inputs the forward needs beside them (the family's `forward_fills`)."""
    prompt_len = tensors["input_ids"].shape[1]
    out = {}
    for key, value in tensors.items():
        if key in DROP:
            continue
        if key == "input_ids":
            out[key] = torch.cat([value, answer.to(value.device, value.dtype).view(1, -1)], dim=1)
        elif key in SEQUENCE_FILL and value.dim() == 2 and value.shape[1] == prompt_len:
            fill = torch.full((1, answer.numel()), SEQUENCE_FILL[key], dtype=value.dtype, device=value.device)
            out[key] = torch.cat([value, fill], dim=1)
        elif value.dim() == 2 and value.shape == (1, prompt_len) and not value.dtype.is_floating_point:
            raise VRHError(f"discovery does not know how to extend the per-token input {key!r} over the answer")
        else:
            out[key] = value
    for name in fills:
        if name not in out and (value := FORWARD_FILLS[name](out)) is not None:
            out[name] = value
    return out
