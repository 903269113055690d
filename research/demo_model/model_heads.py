"""The demo model's attention heads: which layers an option names, each head's parameters, zeroing heads' outputs,
and drawing head sets (top of a ranking, random, layer-matched).

Shared by the trainer (head dropout, the pruner), the held-out evaluation and the k-curve, so none of them imports
another for it. Ablation zeroes a head's slice of each text layer's `o_proj` input through the decoder's named
`head_out` site (vrh_lmms.model.backbone), the same operation as zeroing those `o_proj` weight columns; the projections
themselves come from `locate_decoder`, never by attribute.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

import numpy as np
import torch

from vrh_lmms.base.heads import draws
from vrh_lmms.base.heads.geometry import Geometry, HeadRef
from vrh_lmms.model.ablation import ablated
from vrh_lmms.model.backbone import locate_decoder

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
    """Zero the listed heads' outputs before `o_proj` (every position, every sample): the product's ablation
    (vrh_lmms.model.ablation) at the decoder's named head-output site, restored on exit."""
    with ablated(model, [HeadRef(layer, head) for layer, head in heads], method="hook"):
        yield


# ---------------------------------------------------------------- head sets


def ranking(scores: np.ndarray) -> list[Head]:
    """Every head, best first (ties by layer, then head)."""
    n_layers, n_heads = scores.shape
    heads = [(l, h) for l in range(n_layers) for h in range(n_heads)]
    return sorted(heads, key=lambda lh: (-scores[lh], lh[0], lh[1]))


def random_heads(n_layers: int, n_heads: int, k: int, rng: np.random.Generator,
                 exclude: Sequence[Head] = ()) -> list[Head]:
    """The product's uniform draw (vrh_lmms.base.heads.draws.random_heads) on the demo's (layer, head) tuples, from a
    shared generator."""
    g = Geometry(n_layers, n_heads, n_heads, 1)
    drawn = draws.random_heads(g, k, rng, frozenset(HeadRef(*h) for h in exclude))
    return [(h.layer, h.head) for h in drawn]


def layer_matched_heads(top: Sequence[Head], n_heads: int, rng: np.random.Generator) -> list[Head]:
    """The product's layer-matched draw (vrh_lmms.base.heads.draws.layer_matched_heads): as many heads per layer as
    `top`, from that layer's other heads; ValueError where a layer has too few."""
    for layer, count in sorted(Counter(l for l, _ in top).items()):
        if n_heads - count < count:
            raise ValueError(f"layer {layer} has only {n_heads - count} heads outside the top set; need {count}")
    g = Geometry(max(l for l, _ in top) + 1, n_heads, n_heads, 1)
    drawn = draws.layer_matched_heads([HeadRef(*h) for h in top], g, rng)
    return [(h.layer, h.head) for h in drawn]
