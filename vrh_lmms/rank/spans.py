"""Each candidate image's token positions in a multi-image prompt (Qwen2.5-VL layout: every image is its own
`<|vision_start|> <|image_pad|>... <|vision_end|>` span). Pure: input_ids and the processor's special-token ids in."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vrh_lmms.errors import VRHError


def special_ids(processor) -> tuple[int, int, int]:
    """(vision_start, vision_end, image_pad) ids from the processor's tokenizer (Qwen2-VL-style processors)."""
    tok = processor.tokenizer
    ids = []
    for name in ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>"):
        i = tok.convert_tokens_to_ids(name)
        if i is None or i == tok.unk_token_id:
            raise VRHError(f"the processor's tokenizer has no {name} token; the ranker needs a Qwen2-VL-style "
                           f"multi-image layout (vrh_qwen25)")
        ids.append(int(i))
    return ids[0], ids[1], ids[2]


def candidate_spans(input_ids: Sequence[int] | np.ndarray, start_id: int, end_id: int,
                    pad_id: int) -> list[np.ndarray]:
    """Positions of the image-pad tokens of each vision_start .. vision_end span, in prompt order. Refuses unpaired
    markers, a span without pads, and pads outside any span (they would belong to no candidate)."""
    ids = np.asarray(input_ids).ravel()
    starts = np.flatnonzero(ids == start_id)
    ends = np.flatnonzero(ids == end_id)
    if starts.size != ends.size:
        raise VRHError(f"{starts.size} vision_start but {ends.size} vision_end tokens in the prompt")
    spans = []
    for s, e in zip(starts, ends):
        if e <= s:
            raise VRHError(f"vision_end at {e} before its vision_start at {s}")
        inner = np.arange(s + 1, e)
        pads = inner[ids[inner] == pad_id]
        if pads.size == 0:
            raise VRHError(f"the image span at positions {s}-{e} holds no image-pad token")
        spans.append(pads)
    n_pads = int(np.sum(ids == pad_id))
    if n_pads != sum(p.size for p in spans):
        raise VRHError(f"{n_pads} image-pad tokens, {sum(p.size for p in spans)} inside vision spans")
    return spans
