"""The demo model's two held-out scene sets as tasks with their settings built in (no VRH_SYNTH_CONFIG):
`vrh_demo_discovery` (the scenes `vrh-lmms demo` discovers heads on) and `vrh_demo_grounding` (the scenes it
evaluates on). The scene settings come from the shipped model's demo_spec.json, the ranges from
vrh_lmms.base.synth.demo_spec.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vrh_lmms.base.pretrained import demo_folder
from vrh_lmms.base.synth.demo_spec import DISCOVERY_START, EVAL_START, N_DISCOVERY, N_EVAL, DemoSpec
from vrh_lmms.tasks.common import docs as D
from vrh_lmms.tasks.common.grounding_data import synth_local
from vrh_lmms.tasks.common.sources import Source

SCENE_SETS = {"vrh_demo_discovery": (N_DISCOVERY, DISCOVERY_START), "vrh_demo_grounding": (N_EVAL, EVAL_START)}


def scene_set(task: str) -> dict[str, Any]:
    """The synthetic-scene settings (VRH_SYNTH_CONFIG's keys) a demo task evaluates."""
    n, start = SCENE_SETS[task]
    return DemoSpec.load(demo_folder()).scene_set(n, start)


def _loader(task: str) -> Callable[[Any], Any]:
    def process_docs(dataset):
        docs = synth_local(Source("synth", scene_set(task), f"task {task}"), "test")
        return D.with_keys(docs, task)

    process_docs.__name__ = process_docs.__qualname__ = task
    return process_docs


vrh_demo_discovery = _loader("vrh_demo_discovery")
vrh_demo_grounding = _loader("vrh_demo_grounding")
