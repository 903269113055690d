"""Which image keys each (layer, KV group) keeps after prefill: the retrieval-head policy and its controls (pure).

A key-value head serves `heads // kv_heads` query heads (GQA), and the cache stores keys per KV head, so the
decision is made per KV group: a group keeps the image tokens when it serves a chosen head. A budget is the share of
image KV kept over all (layer, group) slots. The policies at one budget:

* ``retrieval``: groups in the order of the heads file's ranking (the group of the best-ranked head first, each
  group once: a group's rank is its best head's), the first round(budget * layers * kv_heads) keep their image
  tokens, the others keep none. With k heads chosen this keeps exactly the groups holding a top-k head at the
  budget `topk_budget(k)`; other budgets extend or cut that list in score order. Heads that write nothing (dead:
  o_proj columns all zero) are ranked after the live ones, as the random control draws live heads first.
* ``random``: the same rule with the live heads in a seeded random order (a random draw of heads -> their groups),
  so the control keeps the same number of groups; groups whose heads all write nothing come last.
* ``uniform``: every group keeps the same evenly spaced round(budget * n) image tokens (image-token pruning
  applied to all heads alike).
* ``none``: nothing dropped (budget 1).

Sink positions (the first `sink`), text tokens and the last `recent` prompt positions are always kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import Geometry, HeadRef, layer_ranges

POLICIES = ("retrieval", "random", "uniform", "none")
SINK, RECENT = 4, 8


@dataclass(frozen=True)
class KVPolicy:
    """A decided policy: `groups[l, g]` keeps image tokens; a keeping group keeps `image_share` of them."""

    name: str
    budget: float
    groups: np.ndarray  # (layers, kv_heads) bool
    image_share: float = 1.0
    sink: int = SINK
    recent: int = RECENT
    seed: int | None = None

    @property
    def kept_fraction(self) -> float:
        """Share of the image KV slots kept, as decided (before rounding to whole image tokens for `uniform`)."""
        return float(self.groups.mean()) * self.image_share

    def describe(self) -> dict:
        return {"policy": self.name, "budget": self.budget, "seed": self.seed, "sink": self.sink,
                "recent": self.recent, "groups_kept": int(self.groups.sum()), "groups": int(self.groups.size),
                "image_share": self.image_share}


def check_kv_geometry(geometry: Geometry) -> Geometry:
    """The KV policy holds one (layers, KV heads) grid of groups of one width: a decoder whose layers differ is
    refused in one line naming why (a hybrid decoder's linear-attention layers keep a recurrent state, not keys;
    per-layer KV-head counts or head widths would need a grid per layer)."""
    if geometry.head_layers is not None:
        raise VRHError(f"the KV policy needs a KV cache in every decoder layer; this hybrid decoder caches keys "
                       f"only in its attention layers {layer_ranges(geometry.attention_layers)} (the others keep a "
                       "recurrent state), which the policy does not model yet; ablation, sweeps and discovery "
                       "work on it")
    if not geometry.uniform:
        widths = sorted({(geometry.kv(la), geometry.dim(la)) for la in geometry.attention_layers})
        raise VRHError(f"the KV policy needs one KV-head count and head width in every layer; this decoder's layers "
                       f"have {', '.join(f'{k} x {d}' for k, d in widths)} (KV heads x head_dim), which the policy "
                       "does not model yet: ablation, sweeps and discovery work on it")
    return geometry


def check_budget(budget: float) -> float:
    if not 0.0 <= float(budget) <= 1.0:
        raise VRHError(f"KV budget {budget!r} outside 0..1 (the share of image KV kept)")
    return float(budget)


def group_of(head: HeadRef, geometry: Geometry) -> tuple[int, int]:
    """(layer, KV group) of a query head: consecutive query heads share a KV head (transformers' repeat_kv)."""
    return head.layer, head.head // (geometry.heads // geometry.kv_heads)


def group_order(heads: Iterable[HeadRef], geometry: Geometry) -> list[tuple[int, int]]:
    """Each KV group once, in the order its first head appears in `heads`."""
    seen: dict[tuple[int, int], None] = {}
    for h in heads:
        seen.setdefault(group_of(h, geometry), None)
    return list(seen)


def _take(order: Sequence[tuple[int, int]], geometry: Geometry, budget: float) -> np.ndarray:
    groups = np.zeros((geometry.layers, geometry.kv_heads), dtype=bool)
    for layer, g in order[:int(round(budget * groups.size))]:
        groups[layer, g] = True
    return groups


def _complete(order: list[tuple[int, int]], geometry: Geometry, rest_rng: np.random.Generator | None
              ) -> list[tuple[int, int]]:
    """Append the groups `order` misses (in index order, or shuffled) so every budget up to 1 can be met."""
    have = set(order)
    missing = [(la, g) for la in range(geometry.layers) for g in range(geometry.kv_heads) if (la, g) not in have]
    if rest_rng is not None:
        missing = [missing[i] for i in rest_rng.permutation(len(missing))]
    return order + missing


def retrieval_policy(ranking: Sequence[HeadRef], geometry: Geometry, budget: float,
                     live: Sequence[HeadRef] | None = None, **kw) -> KVPolicy:
    """Groups ranked by their best head in the heads file's ranking keep image tokens until the budget is used.

    With `live` given, heads that write nothing are ranked after every live head (their attention can score high,
    but their keys change no output): the same knowledge the random control's draws from live heads use."""
    if live is not None:
        alive = set(live)
        ranking = [h for h in ranking if h in alive] + [h for h in ranking if h not in alive]
    order = _complete(group_order(ranking, geometry), geometry, None)
    return KVPolicy("retrieval", check_budget(budget), _take(order, geometry, budget), **kw)


def random_policy(live: Sequence[HeadRef], geometry: Geometry, budget: float, seed: int, **kw) -> KVPolicy:
    """The retrieval rule with the live heads in a seeded random order (same number of groups kept)."""
    if not live:
        raise VRHError("random KV control: the model has no live head to draw")
    rng = np.random.default_rng(int(seed))
    heads = sorted(live)
    drawn = [heads[i] for i in rng.permutation(len(heads))]
    order = _complete(group_order(drawn, geometry), geometry, rng)
    return KVPolicy("random", check_budget(budget), _take(order, geometry, budget), seed=int(seed), **kw)


def uniform_policy(geometry: Geometry, budget: float, **kw) -> KVPolicy:
    """Every group keeps the same evenly spaced share `budget` of the image tokens."""
    groups = np.ones((geometry.layers, geometry.kv_heads), dtype=bool)
    return KVPolicy("uniform", check_budget(budget), groups, image_share=float(budget), **kw)


def no_policy(geometry: Geometry, **kw) -> KVPolicy:
    return KVPolicy("none", 1.0, np.ones((geometry.layers, geometry.kv_heads), dtype=bool), **kw)


def topk_budget(ranking: Sequence[HeadRef], geometry: Geometry, k: int) -> float:
    """The budget at which `retrieval` keeps exactly the groups holding one of the top-k heads."""
    if not 0 < k <= len(ranking):
        raise VRHError(f"--k {k}: the heads file ranks {len(ranking)} heads")
    return len(group_order(ranking[:k], geometry)) / (geometry.layers * geometry.kv_heads)


def evenly_spaced(n: int, m: int) -> np.ndarray:
    """m distinct indices of 0..n-1 spread evenly (the middle of each of m equal stretches)."""
    m = max(0, min(int(m), n))
    return np.floor((np.arange(m) + 0.5) * n / m).astype(int) if m else np.zeros(0, dtype=int)


def droppable(image: np.ndarray, prompt_len: int, sink: int, recent: int) -> np.ndarray:
    """(seq,) bool: image positions that are neither sink nor among the last `recent` prompt positions."""
    pos = np.arange(image.shape[0])
    return image & (pos >= sink) & (pos < prompt_len - recent)


def dropped(policy: KVPolicy, image: np.ndarray, prompt_len: int | None = None) -> np.ndarray:
    """(layers, kv_heads, seq) bool: the prompt keys each group no longer sees after prefill."""
    image = np.asarray(image, dtype=bool)
    prompt_len = image.shape[0] if prompt_len is None else int(prompt_len)
    cand = droppable(image, prompt_len, policy.sink, policy.recent)
    idx = np.flatnonzero(cand)
    kept_in_group = np.zeros_like(cand)
    kept_in_group[idx[evenly_spaced(idx.size, round(policy.image_share * idx.size))]] = True
    out = np.zeros((*policy.groups.shape, image.shape[0]), dtype=bool)
    out[policy.groups] = cand & ~kept_in_group
    out[~policy.groups] = cand
    return out


def shared_drop(drop: np.ndarray) -> np.ndarray:
    """(layers,) bool: layers whose groups all drop the same positions (their cache can shrink physically)."""
    return (drop == drop[:, :1]).all(axis=(1, 2)) & drop.any(axis=(1, 2))


def image_kept_fraction(drop: np.ndarray, image: np.ndarray, prompt_len: int, sink: int = SINK,
                        recent: int = RECENT) -> float:
    """Share of the droppable image KV slots still kept (what the budget promised, after rounding)."""
    cand = droppable(np.asarray(image, dtype=bool), prompt_len, sink, recent)
    total = cand.sum() * drop.shape[0] * drop.shape[1]
    return 1.0 if total == 0 else 1.0 - float(drop[..., cand].sum()) / float(total)


def kv_bytes(drop: np.ndarray, seq_len: int, head_dim: int, itemsize: int, physical_only: bool = False) -> int:
    """Bytes of K and V kept for a cache of `seq_len` positions; `physical_only`: only layers that can shrink
    (`shared_drop`) count their drop (what the compressed cache really frees; other drops are masked only)."""
    layers, groups = drop.shape[:2]
    per_slot = 2 * head_dim * itemsize
    total = layers * groups * seq_len * per_slot
    if physical_only:
        freed = drop[shared_drop(drop)].sum()
    else:
        freed = drop.sum()
    return int(total - freed * per_slot)
