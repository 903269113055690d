"""Evaluate KV policies through lmms-eval: one run per (policy, budget[, seed]) on one loaded model, each written
as an lmms-eval run folder, then Acc@0.5 with image-clustered intervals and paired drops against no compression.

At budget 1 every policy drops nothing, so its answers are bit-identical to no compression (tests/integration/
test_kvcache.py): those rows reuse the `none` run instead of evaluating it again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vrh_lmms.base.heads.geometry import Geometry, HeadRef
from vrh_lmms.base.runfolder.samples import read_samples
from vrh_lmms.harness import lmms
from vrh_lmms.model.kvcache.apply import kv_compressed
from vrh_lmms.model.kvcache.policy import KVPolicy, no_policy, random_policy, retrieval_policy, uniform_policy


@dataclass
class Planned:
    """One configuration to evaluate: its policy and the name of its run folder."""

    policy: KVPolicy
    name: str


def plan(ranking: list[HeadRef], live: list[HeadRef], geometry: Geometry, budgets: list[float], seeds: int,
         sink: int, recent: int) -> list[Planned]:
    """`none` first, then per budget below 1: retrieval, `seeds` random draws, uniform (both head policies put the
    heads outside `live` last)."""
    kw = dict(sink=sink, recent=recent)
    out = [Planned(no_policy(geometry, **kw), "none")]
    for b in budgets:
        if b >= 1.0:
            continue
        tag = f"b{b:g}"
        out.append(Planned(retrieval_policy(ranking, geometry, b, live, **kw), f"retrieval_{tag}"))
        out += [Planned(random_policy(live, geometry, b, s, **kw), f"random_{tag}_s{s}") for s in range(seeds)]
        out.append(Planned(uniform_policy(geometry, b, **kw), f"uniform_{tag}"))
    return out


@dataclass
class RunOutcome:
    """What one evaluated configuration gave: per-doc outcomes (pooled over tasks) and cache measurements."""

    name: str
    policy: dict[str, Any]
    doc_keys: list[str]
    scores: np.ndarray
    clusters: list[str]
    kind: str
    cache: dict[str, float] = field(default_factory=dict)


def summarize_stats(stats: list[dict]) -> dict[str, float]:
    """Mean per prefill of the image KV kept and the cache bytes (held, claimed, full)."""
    if not stats:
        return {}
    keys = ("image_kv_kept", "kv_bytes_full", "kv_bytes_kept", "kv_bytes_physical", "cache_bytes_claimed",
            "cache_bytes_after")
    return {k: float(np.mean([s[k] for s in stats])) for k in keys if all(k in s for s in stats)}


def read_outcome(name: str, policy: dict, folder: Path, cache: dict[str, float]) -> RunOutcome:
    """Per-doc outcomes of every task in an lmms-eval run folder (clusters: task and image)."""
    keys, scores, clusters, kinds = [], [], [], set()
    for path in sorted(folder.glob("samples_*.jsonl")):
        task = path.stem[len("samples_"):]
        table = read_samples(path)
        kinds.add(table.kind)
        keys += [f"{task}:{d}" for d in table.doc_ids]
        scores.append(table.scores)
        ids = table.image_ids or [f"doc{d}" for d in table.doc_ids]
        clusters += [f"{task}:{i}" for i in ids]
    kind = kinds.pop() if len(kinds) == 1 else "score"
    values = np.concatenate(scores) if scores else np.zeros(0)
    return RunOutcome(name, policy, keys, values, clusters, kind, cache)


def evaluate_policy(lm, planned: Planned, mode: str, tasks: list[str], tm, folder: Path, *, limit, gen_kwargs,
                    seed: int) -> RunOutcome:
    """Run lmms-eval with the policy applied to the loaded model and write the run folder."""
    with kv_compressed(lm.model, planned.policy, mode) as comp:
        results = lmms.evaluate(lm, tasks, tm, limit=limit, gen_kwargs=gen_kwargs, seed=seed)
    cache = summarize_stats(comp.stats)
    info = {**planned.policy.describe(), "mode": mode, "cache": cache}
    lmms.write_run(folder / planned.name, results, {"kv_cache": info})
    return read_outcome(planned.name, info, folder / planned.name, cache)
