"""Which data source a plugin task will read, resolved before any row loads: what a run records as the data it used
(a sweep's `sweep.json`, discovery's parts identity), so a run on local files or another hub id never reads as a
run on the default data."""

from __future__ import annotations

from typing import Any

from vrh_lmms.tasks.common import grounding_data, vqa_data
from vrh_lmms.tasks.common.sources import Source, resolve

SYNTH_VQA = "vrh_synth_vqa"  # tasks/common/synth_vqa.py: the synthetic scenes as questions


def task_source(task: str) -> Source | None:
    """The source `task`'s process_docs will choose from the environment (`resolve`, without reading a row); None
    for a task outside the benchmark tables (a derived YAML's own rows, the needle tasks). A misconfigured source
    raises its one-line SourceError."""
    if task == SYNTH_VQA:
        return resolve("SYNTH", None, Source("synth", {}), None, ("synth",))
    if task in grounding_data.TASK_SPLITS:
        bench = grounding_data.BENCHMARKS[grounding_data.TASK_SPLITS[task][0]]
        return resolve(bench.key, None, bench.default, bench.local_kind, bench.allowed,
                       root_fallback=grounding_data.ROOT_FALLBACK.get(bench.key))
    if task in vqa_data.TASK_SPLITS:
        bench = vqa_data.VQA_BENCHMARKS[vqa_data.TASK_SPLITS[task][0]]
        return resolve(bench.key, None, bench.default, bench.local_kind, bench.allowed)
    return None


def source_record(source: Source) -> dict[str, Any]:
    """A source as a run records it: its kind, what chose it (the variable), and its options (paths, hub id)."""
    return {"kind": source.kind, "from": source.origin, **{k: str(v) for k, v in source.options.items()}}


def chosen_sources(tasks: list[str]) -> dict[str, Source]:
    """The tasks whose source is not their benchmark's default (a variable chose it), with that source."""
    out = {}
    for task in tasks:
        source = task_source(task)
        if source is not None and source.origin != "the default":
            out[task] = source
    return out
