"""The paper's published retrieval heads (arXiv 2608.27417 v1, Appendix D, Tables A2-A6: the top-20 heads of
Qwen2.5-VL-7B, Qwen3-VL-8B, InternVL3-8B and InternVL3.5-8B on five benchmarks, Q_out + Phi_sum + Omega_mean on
200 detection samples), as heads files: `heads=paper:top20` in model args, the benchmark from
`heads_source=paper:refcoco|refcoco_plus|refcocog|toloka|refspatial` (default refcoco).

A checkpoint is matched to a published model by its hub id, else by its family and geometry (layers x heads):
Qwen2.5-VL-7B and InternVL3-8B share 28 x 28, Qwen3-VL-8B and InternVL3.5-8B 36 x 32, so the family tells them apart.
The published order is the ranking, and only the 20 published heads are ranked (top<K> beyond 20 is refused); the
scores are the ranks (20 for the first head, 1 for the twentieth, 0 for the rest), since the paper prints heads, not
scores.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import Geometry, parse_head
from vrh_lmms.base.heads.heads_file import HeadsFile
from vrh_lmms.base.paths import assets_path

PREFIX = "paper:"
DEFAULT_BENCHMARK = "refcoco"
# published model -> (hub ids of its checkpoints, vrh family)
MODELS: dict[str, tuple[tuple[str, ...], str]] = {
    "Qwen2.5-VL-7B": (("Qwen/Qwen2.5-VL-7B-Instruct",), "qwen2_5_vl"),
    "Qwen3-VL-8B": (("Qwen/Qwen3-VL-8B-Instruct",), "qwen3_vl"),
    "InternVL3-8B": (("OpenGVLab/InternVL3-8B-hf", "OpenGVLab/InternVL3-8B"), "internvl"),
    "InternVL3.5-8B": (("OpenGVLab/InternVL3_5-8B-HF", "OpenGVLab/InternVL3_5-8B"), "internvl"),
}
_CHAT = {"internvl_chat": "internvl"}  # remote-code checkpoints of the same models


@lru_cache(maxsize=1)
def published() -> dict[str, Any]:
    return json.loads((assets_path() / "paper_heads.json").read_text())


def benchmarks() -> list[str]:
    return list(published()["heads"])


def benchmark_of(source: str | None) -> str:
    """`heads_source=paper:refcocog` -> "refcocog" (None: the default benchmark)."""
    if source is None:
        return DEFAULT_BENCHMARK
    name = source[len(PREFIX):] if source.startswith(PREFIX) else source
    if name not in benchmarks():
        raise VRHError(f"heads_source={source!r}: the paper publishes heads for "
                       f"{', '.join(PREFIX + b for b in benchmarks())}")
    return name


def match_model(pretrained: str | None, family: str, geometry: Geometry) -> str:
    """The published model a checkpoint is: by hub id, else by family and geometry; a clear error otherwise."""
    text = str(pretrained or "").rstrip("/")
    for model, (hub_ids, _) in MODELS.items():
        if text in hub_ids or any(text.endswith("/" + h.split("/")[-1]) for h in hub_ids):
            return model
    fam = _CHAT.get(family, family)
    shapes = published()["geometry"]
    for model, (_, model_family) in MODELS.items():
        shape = shapes[model]
        if model_family == fam and (shape["layers"], shape["heads"]) == (geometry.layers, geometry.heads):
            return model
    known = "; ".join(f"{m} ({MODELS[m][1]}, {s['layers']} x {s['heads']})" for m, s in shapes.items())
    raise VRHError(f"pretrained={pretrained}: no published head list fits it (family {family}, {geometry.layers} "
                   f"layers x {geometry.heads} heads); the paper publishes heads for {known}")


def paper_heads_file(pretrained: str | None, family: str, geometry: Geometry, source: str | None = None) -> HeadsFile:
    """The published top-20 of the matching model on the chosen benchmark, as a heads file on `geometry`."""
    benchmark = benchmark_of(source)
    model = match_model(pretrained, family, geometry)
    heads = [parse_head(h) for h in published()["heads"][benchmark][model]]
    for h in heads:
        geometry.check(h, where=f"published head of {model}")
    scores = np.zeros((geometry.layers, geometry.heads))
    for rank, h in enumerate(heads):
        scores[h.layer, h.head] = len(heads) - rank
    # only the published heads are ranked: top<K> beyond them is refused ("more heads than the heads file ranks")
    hf = HeadsFile(model={"id": pretrained or model, "family": family, "published_model": model},
                   geometry=geometry, scores=scores, ranking=heads,
                   scoring={"source": published()["source"], "cell": "out,sum,mean", "benchmark": benchmark,
                            "published": len(heads)})
    hf.path = Path(f"{PREFIX}{benchmark}")  # what runs record as the heads file's origin
    hf.source = f"{PREFIX}{benchmark}"
    return hf
