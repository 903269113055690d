"""Per-head attention over the image tokens -> the maps the paper's Figs A1/A2 show: the mean of all heads, of the
top-k retrieval heads, and of all heads but those."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import HeadRef

VIEWS = ("all", "top", "rest")
VIEW_TITLES = {"all": "all heads", "top": "top-{k} VRHs", "rest": "all heads but the top-{k}"}


def head_set_map(per_head: np.ndarray, heads: Sequence[HeadRef]) -> np.ndarray:
    """Mean over `heads` of per_head (layers, heads, n_tokens) -> (n_tokens,)."""
    if not heads:
        raise VRHError("a head set's map needs at least one head")
    layers, n_heads = per_head.shape[:2]
    bad = [h for h in heads if not (0 <= h.layer < layers and 0 <= h.head < n_heads)]
    if bad:
        raise VRHError(f"head {bad[0]} is outside the captured geometry ({layers} layers x {n_heads} heads)")
    idx = np.array([(h.layer, h.head) for h in heads])
    return per_head[idx[:, 0], idx[:, 1]].mean(axis=0)


def view_maps(per_head: np.ndarray, top: Sequence[HeadRef]) -> dict[str, np.ndarray]:
    """{"all", "top", "rest"} -> (n_tokens,) mean maps; `top` is the top-k head set."""
    layers, n_heads = per_head.shape[:2]
    chosen = set(top)
    rest = [HeadRef(l, h) for l in range(layers) for h in range(n_heads) if HeadRef(l, h) not in chosen]
    return {"all": per_head.reshape(layers * n_heads, -1).mean(axis=0), "top": head_set_map(per_head, list(top)),
            "rest": head_set_map(per_head, rest)}
