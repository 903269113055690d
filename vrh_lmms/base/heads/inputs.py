"""Heads given on a command line: a heads file's path, or `paper:<model>[:<benchmark>]` for one of the paper's
published top-20 lists (vrh_lmms.base.heads.paper), e.g. `paper:Qwen2.5-VL-7B:refcoco`.

Published lists carry a ranking of 20 heads and no scores; `is_ranking_only` tells a caller so (no Spearman, no
score distribution from them)."""

from __future__ import annotations

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import paper
from vrh_lmms.base.heads.geometry import Geometry
from vrh_lmms.base.heads.heads_file import HeadsFile, load_heads_file

# key-value heads and head width of the published models' language decoders (their hub config.json files:
# Qwen2.5-VL-7B and InternVL3-8B's Qwen2.5-7B, 4 x 128; Qwen3-VL-8B and InternVL3.5-8B's Qwen3-8B, 8 x 128);
# the published heads file needs a whole geometry, though only layers x heads name a head
_KV = {"Qwen2.5-VL-7B": (4, 128), "InternVL3-8B": (4, 128), "Qwen3-VL-8B": (8, 128), "InternVL3.5-8B": (8, 128)}


def load_heads_input(text: str) -> HeadsFile:
    """A heads file from a path or a `paper:` name; a clear one-line error naming the bad part otherwise."""
    if text.startswith(paper.PREFIX):
        return published_heads(text)
    return load_heads_file(text)


def published_heads(text: str) -> HeadsFile:
    """`paper:Qwen2.5-VL-7B:refcocog` -> that list (benchmark default: refcoco); the model matched without case."""
    parts = text[len(paper.PREFIX):].split(":")
    if len(parts) > 2 or not parts[0]:
        raise VRHError(f"{text!r}: expected paper:<model>[:<benchmark>], e.g. paper:Qwen2.5-VL-7B:refcoco")
    by_lower = {m.lower(): m for m in paper.MODELS}
    model = by_lower.get(parts[0].lower())
    if model is None:
        raise VRHError(f"{text!r}: the paper publishes heads for {', '.join(paper.MODELS)}, not {parts[0]!r}")
    benchmark = parts[1] if len(parts) == 2 else paper.DEFAULT_BENCHMARK
    if benchmark not in paper.benchmarks():
        raise VRHError(f"{text!r}: the paper publishes heads on {', '.join(paper.benchmarks())}, not {benchmark!r}")
    shape = paper.published()["geometry"][model]
    kv_heads, head_dim = _KV[model]
    geometry = Geometry(layers=int(shape["layers"]), heads=int(shape["heads"]), kv_heads=kv_heads, head_dim=head_dim)
    hub_id, family = paper.MODELS[model][0][0], paper.MODELS[model][1]
    hf = paper.paper_heads_file(hub_id, family, geometry, source=benchmark)
    hf.model = {**hf.model, "id": model}
    return hf


def is_ranking_only(hf: HeadsFile) -> bool:
    """A published list: its scores are ranks (20 ... 1, 0 for unranked heads), not attention scores."""
    return bool(hf.source and hf.source.startswith(paper.PREFIX))
