"""The `box` evidence kind: a ground-truth box in the doc's one image -> the image tokens it covers (the paper's)."""

from __future__ import annotations

import torch

from vrh_lmms.model.capture.layouts import box_key_mask, image_token_map
from vrh_lmms.runs.discovery.evidence import KIND_BOX, EvidenceKeys, EvidenceKind, KeyContext, register_evidence
from vrh_lmms.runs.discovery.targets import Target, target_from_doc


def box_keys(target: Target, ctx: KeyContext) -> EvidenceKeys:
    tmap = image_token_map(ctx.family, ctx.prompt_ids, target.image_size, dict(ctx.extras or {}))
    return EvidenceKeys(evidence=box_key_mask(tmap, target.box, ctx.seq_len, rule=ctx.key_tokens),
                        media=tmap.key_mask(ctx.seq_len), tmap=tmap)


def empty_keys(seq_len: int) -> EvidenceKeys:
    return EvidenceKeys(torch.zeros(seq_len, dtype=torch.bool), torch.zeros(seq_len, dtype=torch.bool))


BOX = register_evidence(EvidenceKind(KIND_BOX, lambda doc, where: target_from_doc(dict(doc), where=where), box_keys,
                                     grid=True, doc="a box in the doc's one image (vrh_gt_box)"))
