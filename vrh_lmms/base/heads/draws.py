"""The head draws that the kinds of head set are made of (vrh_lmms.base.heads.kinds): uniform random, layer-matched
random, explicit heads. The image-matched draw is in vrh_lmms.base.heads.controls."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import Geometry, HeadRef, parse_head


class ControlUnavailable(VRHError):
    """A control head set that cannot be drawn from its pool (e.g. a layer without enough live heads)."""


def random_heads(geometry: Geometry, k: int, seed: int | np.random.Generator,
                 exclude: frozenset[HeadRef] = frozenset()) -> list[HeadRef]:
    """k heads drawn uniformly without replacement from the heads not in `exclude` (with nothing excluded, exactly
    the draw of `rng.choice(total_heads, k)`: the same seed gives the same heads as before pools existed). `seed`
    may be a generator whose state the draw advances (a series of draws from one stream). Only the layers with
    heads are drawn from (a hybrid decoder's linear-attention layers have none); index i is `all_heads()[i]`,
    which for a uniform decoder is L(i // heads)H(i % heads), as it always was."""
    every = geometry.all_heads()
    flat = np.array([i for i, head in enumerate(every) if head not in exclude])
    if k > flat.size:
        what = "live heads" if exclude else "heads"
        raise VRHError(f"random{k} asks for more heads than the model has {what} ({flat.size})")
    rng = np.random.default_rng(seed)
    idx = rng.choice(flat, size=k, replace=False)
    return sorted(every[int(i)] for i in idx)


def layer_matched_heads(top: list[HeadRef], geometry: Geometry, seed: int | np.random.Generator,
                        exclude: frozenset[HeadRef] = frozenset()) -> list[HeadRef]:
    """Same count per layer as `top`, drawn from each layer's heads that are neither in `top` nor in `exclude`
    (`seed`: an int, or a generator whose state the draw advances)."""
    rng = np.random.default_rng(seed)
    chosen = set(top)
    out: list[HeadRef] = []
    for layer, count in sorted(Counter(h.layer for h in top).items()):
        pool = [h for h in range(geometry.heads) if HeadRef(layer, h) not in chosen | exclude]
        if count > len(pool):
            others = geometry.heads - sum(1 for h in range(geometry.heads) if HeadRef(layer, h) in chosen)
            live = "live " if exclude else ""
            if not pool:  # "only 0 other live heads are left" read as a slip
                left = f"no other {live}head is left" + (f" (all {others} of its others write nothing)"
                                                         if exclude and others else "")
            else:
                dead = f" ({others - len(pool)} of its {others} others write nothing)" if exclude and \
                    others > len(pool) else ""
                left = (f"only {len(pool)} other {live}head{'' if len(pool) == 1 else 's'} "
                        f"{'is' if len(pool) == 1 else 'are'} left{dead}")
            raise ControlUnavailable(f"layer-matched control impossible in layer {layer}: the top set holds {count} "
                                     f"of its {geometry.heads} heads, and {left}")
        out.extend(HeadRef(layer, int(h)) for h in rng.choice(pool, size=count, replace=False))
    return sorted(out)


def explicit_heads(text: str, forms: str = "heads like L12H3;L14H0") -> list[HeadRef]:
    """`L12H3;L14H0` -> its heads, each bad token or repeated head named (`forms`: the spec forms a bad token is
    told to use instead, vrh_lmms.base.heads.kinds)."""
    heads = []
    for tok in [t for t in re.split(r"[;\s]+", text) if t]:
        try:
            heads.append(parse_head(tok))
        except VRHError:
            raise VRHError(
                f"bad head spec token {tok!r} in {text!r}: use {forms}") from None
    if len(set(heads)) != len(heads):
        dup = [str(h) for h, c in Counter(heads).items() if c > 1]
        raise VRHError(f"head spec {text!r} names {', '.join(dup)} more than once")
    return heads
