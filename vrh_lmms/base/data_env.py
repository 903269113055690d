"""The `VRH_*` environment variables that choose a task's data or how its answers are scored: part of a run's identity,
so a resumed or --force'd run never mixes answers made on other data or read under another box convention.

Two kinds, both read here from one rule each:
- the per-benchmark rule of `tasks/common/sources.py` (`resolve`): `VRH_<KEY>_<PART>` for every PART of
  `SOURCE_PARTS`, whatever the KEY (so a benchmark added later is covered without an entry here);
- the named variables of `DATA_VARIABLES` (synthetic configs, MM-NIAH, Visual Haystacks, VAW, the box convention).
tests/unit/test_data_env.py checks that every `VRH_*` variable the task code reads is one of them.
"""

from __future__ import annotations

import os
import re

# The per-benchmark rule (tasks/common/sources.py reads exactly these parts): force a source kind, files in the hub
# schema, the benchmark's own layout, an image folder, another hub id.
SOURCE_PARTS = ("SOURCE", "DATA", "ROOT", "IMAGES", "HUB")
# The benchmarks' keys (tasks/common/grounding_data.py, vqa_data.py; docs/configuration.md lists them): what a run
# file's `env:` may name under the per-benchmark rule. tests/unit/test_configuration_docs.py keeps it the tables'.
BENCHMARK_KEYS = ("CV_BENCH", "COUNTBENCH", "MATHVISTA", "MMSTAR", "REFCOCO", "REFCOCOG", "REFCOCO_PLUS",
                  "REFSPATIAL", "SPATIAL457", "SPATIALRGPT", "SYNTH", "SYNTH_REFER", "TOLOKA", "VAW")
_SOURCE_VARIABLE = re.compile(r"VRH_[A-Z0-9_]+?_(?:" + "|".join(SOURCE_PARTS) + r")")

BOX_CONVENTION = "VRH_BOX_CONVENTION"  # vrh_lmms.base.boxes.context.ENV_VAR: how answers' boxes are read
DATA_VARIABLES = ("VRH_SYNTH_CONFIG", "VRH_NEEDLE_CONFIG", "VRH_REFCOCO_ROOT", "VRH_REFCOCO_DATA", "VRH_TOLOKA_IMAGES",
                  "VRH_SPATIALRGPT_IMAGES", "VRH_VAW_IMAGES", "VRH_VAW_ROOT", "VRH_VAW_MC", "VRH_VAW_MODE",
                  "VRH_MMNIAH_DIR", "VRH_MMNIAH_SPLIT", "VRH_MMNIAH_IMAGES", "VRH_MMNIAH_LIMIT", "VRH_MMNIAH_DOCS",
                  "VRH_MMNIAH_MAX_CONTEXT", "VRH_VHS_DIR", "VRH_VHS_IMAGES", "VRH_VHS_SUBSET", "VRH_VHS_SIZE",
                  "VRH_VHS_SEED", "VRH_VHS_LIMIT", "VRH_HAYSTACK_CONFIG",
                  "VRH_CLIP_CONFIG", "VRH_AUDIO_CONFIG", "VRH_FACT_CONFIG", BOX_CONVENTION)
# Read by the code but choosing no data: where generated data are cached (the same data wherever they are).
SETTING_VARIABLES = ("VRH_CACHE_DIR",)


def source_variable(key: str, part: str) -> str:
    """`VRH_<key>_<part>`: the per-benchmark rule's name for one part of one benchmark's source."""
    return f"VRH_{key}_{part}"


def is_data_variable(name: str) -> bool:
    """Whether the variable `name` chooses data or scoring: a named one, or any under the per-benchmark rule."""
    return name in DATA_VARIABLES or _SOURCE_VARIABLE.fullmatch(name) is not None


def benchmark_variables() -> tuple[str, ...]:
    """Every name the per-benchmark rule gives the known keys."""
    return tuple(source_variable(k, p) for k in BENCHMARK_KEYS for p in SOURCE_PARTS)


def data_env(skip: tuple[str, ...] = ()) -> dict[str, str]:
    """The data-choosing variables set in this process (those in `skip` left out), by name."""
    return {k: os.environ[k] for k in sorted(os.environ) if is_data_variable(k) and k not in skip}
