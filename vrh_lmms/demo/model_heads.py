"""The demo model's attention heads: which layers an option names, each head's parameters, zeroing heads' outputs,
and drawing head sets (top of a ranking, random, layer-matched).

Shared by the trainer (head dropout, the pruner), the held-out evaluation and the k-curve, so none of them imports
another for it. Ablation zeroes a head's slice of each text layer's `o_proj` input with a forward pre-hook, the same
operation as zeroing those `o_proj` weight columns.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import torch

Head = tuple[int, int]


def text_layers(model) -> list:
    return list(model.model.language_model.layers)


def chosen_layers(model, layers: tuple, option: str) -> list[tuple[int, object]]:
    """(index, layer) for the text layers a design option names (empty: all); an index the model lacks is refused,
    naming the option."""
    all_layers = text_layers(model)
    bad = [i for i in layers if not 0 <= i < len(all_layers)]
    if bad:
        raise ValueError(f"{option} {bad} out of range: the model has {len(all_layers)} text layers")
    return [(i, layer) for i, layer in enumerate(all_layers) if not layers or i in layers]


def geometry(model) -> tuple[int, int, int]:
    """(layers, heads, head_dim) of the language decoder; heads = o_proj.in_features // head_dim."""
    layers = text_layers(model)
    attn = layers[0].self_attn
    return len(layers), attn.o_proj.in_features // attn.head_dim, attn.head_dim


def head_groups(model, layers: tuple = (), option: str = "head_prune_layers") -> list[tuple[int, int, object, slice]]:
    """(layer, head, its attention module, its rows) for every head of the chosen text layers (empty: all); `option`
    names the design option an out-of-range layer is reported under.

    Assumes one key/value head per query head (the demo's designs); grouped-query attention would share k and v.
    """
    out = []
    for index, layer in chosen_layers(model, layers, option):
        attn = layer.self_attn
        hd, n_heads = attn.head_dim, attn.o_proj.in_features // attn.head_dim
        if attn.k_proj.out_features != n_heads * hd:
            raise ValueError(f"layer {index}: head groups need one key/value head per query head")
        out += [(index, h, attn, slice(h * hd, (h + 1) * hd)) for h in range(n_heads)]
    return out


def head_params(attn, rows: slice) -> list[torch.Tensor]:
    """What one head owns: its q, k, v rows and biases and its o_proj columns (fresh views, so autograd sees them)."""
    parts = [attn.o_proj.weight[:, rows]]
    for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
        parts.append(proj.weight[rows])
        if proj.bias is not None:
            parts.append(proj.bias[rows])
    return parts


def group_norms(groups) -> torch.Tensor:
    """One L2 norm per head group (a pruned head's is exactly zero)."""
    return torch.stack([torch.sqrt(sum((p.float() ** 2).sum() for p in head_params(attn, rows)))
                        for _, _, attn, rows in groups])


@contextlib.contextmanager
def ablate(model, heads: Iterable[Head]) -> Iterator[None]:
    """Zero the listed heads' outputs before `o_proj` (every position, every sample)."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    handles = []
    layers = text_layers(model)
    for layer, hs in by_layer.items():
        hd = layers[layer].self_attn.head_dim
        mask = torch.ones(layers[layer].self_attn.o_proj.in_features)
        for h in hs:
            mask[h * hd:(h + 1) * hd] = 0.0

        def hook(module, args, mask=mask):
            return (args[0] * mask.to(args[0].dtype),) + tuple(args[1:])

        handles.append(layers[layer].self_attn.o_proj.register_forward_pre_hook(hook))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


# ---------------------------------------------------------------- head sets


def ranking(scores: np.ndarray) -> list[Head]:
    """Every head, best first (ties by layer, then head)."""
    n_layers, n_heads = scores.shape
    heads = [(l, h) for l in range(n_layers) for h in range(n_heads)]
    return sorted(heads, key=lambda lh: (-scores[lh], lh[0], lh[1]))


def random_heads(n_layers: int, n_heads: int, k: int, rng: np.random.Generator,
                 exclude: Sequence[Head] = ()) -> list[Head]:
    pool = [(l, h) for l in range(n_layers) for h in range(n_heads) if (l, h) not in set(exclude)]
    idx = rng.choice(len(pool), size=k, replace=False)
    return [pool[i] for i in idx]


def layer_matched_heads(top: Sequence[Head], n_heads: int, rng: np.random.Generator) -> list[Head]:
    """Same number of heads per layer as `top`, drawn from that layer's other heads."""
    out: list[Head] = []
    per_layer: dict[int, int] = {}
    for l, _ in top:
        per_layer[l] = per_layer.get(l, 0) + 1
    taken = set(top)
    for l, c in sorted(per_layer.items()):
        pool = [h for h in range(n_heads) if (l, h) not in taken]
        if len(pool) < c:
            raise ValueError(f"layer {l} has only {len(pool)} heads outside the top set; need {c}")
        out.extend((l, int(h)) for h in rng.choice(pool, size=c, replace=False))
    return out
