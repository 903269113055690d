"""The demo model's attention heads: which layers an option names, each head's parameters, zeroing heads' outputs,
and drawing head sets (top of a ranking, random, layer-matched).

Shared by the trainer (head dropout, the pruner), the held-out evaluation and the k-curve, so none of them imports
another for it. Ablation zeroes a head's slice of each text layer's `o_proj` input through the decoder's named
`head_out` site (vrh_lmms.model.backbone), the same operation as zeroing those `o_proj` weight columns; the projections
themselves come from `locate_decoder`, never by attribute.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

import numpy as np
import torch

from vrh_lmms.model.backbone import HEAD_OUT, Hook, locate_decoder, site_name

Head = tuple[int, int]


class HeadProjections(NamedTuple):
    """A layer's q, k, v and output projections: what a head's parameters are sliced from."""

    q: torch.nn.Module
    k: torch.nn.Module
    v: torch.nn.Module
    o: torch.nn.Module
    head_dim: int


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
    """(layers, heads, head_dim) of the language decoder (vrh_lmms.model.backbone's geometry)."""
    g = locate_decoder(model).geometry
    return g.layers, g.heads, g.head_dim


def projections(model, index: int, decoder=None) -> HeadProjections:
    """Layer `index`'s projections, reached through the decoder `locate_decoder` finds (or `decoder`)."""
    decoder = decoder or locate_decoder(model)
    attn = decoder.attns[index]
    return HeadProjections(attn.q_proj, attn.k_proj, attn.v_proj, decoder.out_projs[index], decoder.geometry.head_dim)


def head_groups(model, layers: tuple = (), option: str = "head_prune_layers") -> list[tuple[int, int, object, slice]]:
    """(layer, head, its layer's HeadProjections, its rows) for every head of the chosen text layers (empty: all);
    `option` names the design option an out-of-range layer is reported under.

    Assumes one key/value head per query head (the demo's designs); grouped-query attention would share k and v.
    """
    out = []
    decoder = locate_decoder(model)
    for index, _ in chosen_layers(model, layers, option):
        proj = projections(model, index, decoder)
        hd, n_heads = proj.head_dim, proj.o.in_features // proj.head_dim
        if proj.k.out_features != n_heads * hd:
            raise ValueError(f"layer {index}: head groups need one key/value head per query head")
        out += [(index, h, proj, slice(h * hd, (h + 1) * hd)) for h in range(n_heads)]
    return out


def head_params(proj: HeadProjections, rows: slice) -> list[torch.Tensor]:
    """What one head owns: its q, k, v rows and biases and its o_proj columns (fresh views, so autograd sees them)."""
    parts = [proj.o.weight[:, rows]]
    for proj in (proj.q, proj.k, proj.v):
        parts.append(proj.weight[rows])
        if proj.bias is not None:
            parts.append(proj.bias[rows])
    return parts


def group_norms(groups) -> torch.Tensor:
    """One L2 norm per head group (a pruned head's is exactly zero)."""
    return torch.stack([torch.sqrt(sum((p.float() ** 2).sum() for p in head_params(proj, rows)))
                        for _, _, proj, rows in groups])


@contextlib.contextmanager
def ablate(model, heads: Iterable[Head]) -> Iterator[None]:
    """Zero the listed heads' outputs before `o_proj` (every position, every sample)."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    decoder = locate_decoder(model)
    g = decoder.geometry
    hooks = []
    for layer, hs in by_layer.items():
        mask = torch.ones(g.heads * g.head_dim)
        for h in hs:
            mask[h * g.head_dim:(h + 1) * g.head_dim] = 0.0
        hooks.append(Hook(site_name(layer, HEAD_OUT), lambda x, mask=mask: x * mask.to(x.dtype)))
    with decoder.hooks(hooks):
        yield


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
