"""A run's identity holds every variable the task code reads (vrh_lmms.base.data_env): the per-benchmark
`VRH_<KEY>_<PART>` of every benchmark, the named ones, and the box convention; and it records the data source a
variable chose, not the default one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vrh_lmms.base import data_env
from vrh_lmms.runs.checks import data_identity
from vrh_lmms.tasks.common import grounding_data, vqa_data

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "tasks" / "_template"
# the task code, and the base modules it reads its boxes and generated data through
TASK_CODE = (ROOT / "tasks", ROOT / "vrh_lmms" / "base" / "boxes", ROOT / "vrh_lmms" / "base" / "synth")
# resolve(...) called with a literal key outside the benchmark tables (synth_vqa's SYNTH, vqa_paper's VAW)
LITERAL_KEY = re.compile(r"resolve\(\s*\"([A-Z0-9_]+)\"")


def read_by_tasks() -> set[str]:
    """Every VRH_* variable the task code reads: the names it spells out, and the per-benchmark rule's names of
    every key it resolves (the benchmark tables' and the literal ones)."""
    names, keys = set(), {b.key for b in grounding_data.BENCHMARKS.values()}
    keys |= {b.key for b in vqa_data.VQA_BENCHMARKS.values()}
    for path in (p for folder in TASK_CODE for p in folder.rglob("*.py")):
        if TEMPLATES in path.parents:
            continue
        text = path.read_text(encoding="utf-8")
        names |= set(re.findall(r"VRH_[A-Z0-9_]*[A-Z0-9]", text))
        keys |= set(LITERAL_KEY.findall(text))
    names |= {data_env.source_variable(k, p) for k in keys for p in data_env.SOURCE_PARTS}
    return names - set(data_env.SETTING_VARIABLES)


def test_every_variable_the_task_code_reads_is_in_the_identity(vrh_env):
    names = read_by_tasks()
    assert {"VRH_MMSTAR_DATA", "VRH_SYNTH_REFER_ROOT", "VRH_REFCOCO_HUB", "VRH_VAW_SOURCE",
            "VRH_BOX_CONVENTION"} <= names and len(names) > 80
    for name in sorted(names):
        vrh_env.setenv(name, "/somewhere/else")
    env = data_env.data_env()
    assert sorted(names - set(env)) == []
    # the identities of sweeps and one-result runs (vrh_lmms.runs.maps.setup), and discovery's, carry it
    assert sorted(names - set(data_identity([])["data"])) == []
    from vrh_lmms.runs.discovery.run import DiscoverySpec

    assert sorted(names - set(DiscoverySpec("m", "", [], "h.json").identity()["data"])) == []


def test_settings_that_choose_no_data_stay_out_of_the_identity(vrh_env):
    vrh_env.setenv("VRH_THREADS", "2")
    vrh_env.setenv("VRH_HUB_PROBE_TIMEOUT", "1")
    assert data_env.data_env() == {}  # VRH_CACHE_DIR and VRH_HEADS_REGISTRY are set by the fixture


def test_a_benchmark_added_later_is_covered_by_the_rule(vrh_env):
    vrh_env.setenv("VRH_MYBENCH_DATA", "/data/mine")
    assert data_env.data_env() == {"VRH_MYBENCH_DATA": "/data/mine"}


def test_the_data_a_variable_chose_is_recorded_not_the_default_scenes(vrh_env, tmp_path):
    default = data_identity(["vrh_synth_grounding"])
    assert set(default) == {"synth"}  # the generated scenes (what dpo-pairs regenerates): unchanged for old folders
    vrh_env.setenv("VRH_SYNTH_DATA", str(tmp_path / "scenes"))
    chosen = data_identity(["vrh_synth_grounding"])
    assert "synth" not in chosen  # these docs are not the generated scenes
    assert chosen["sources"] == {"vrh_synth_grounding": {"kind": "files", "from": "VRH_SYNTH_DATA",
                                                         "path": str(tmp_path / "scenes")}}
    vrh_env.setenv("VRH_REFCOCO_HUB", "my-org/RefCOCO-fixed")
    assert data_identity(["vrh_refcoco_val"])["sources"]["vrh_refcoco_val"] == {
        "kind": "hub", "from": "VRH_REFCOCO_HUB", "path": "my-org/RefCOCO-fixed"}


def test_the_synthetic_questions_task_keeps_its_scene_config_in_the_identity(vrh_env):
    """vrh_synth_vqa reads VRH_SYNTH_CONFIG but is no grounding task: its scenes must not be left out."""
    vrh_env.setenv("VRH_SYNTH_CONFIG", '{"n": 5}')
    assert data_identity(["vrh_synth_vqa"])["data"] == {"VRH_SYNTH_CONFIG": '{"n": 5}'}
    assert "VRH_SYNTH_CONFIG" not in data_identity(["vrh_synth_grounding"]).get("data", {})


@pytest.mark.parametrize("name", ["VRH_SYNTH_SOURCE", "VRH_TOLOKA_ROOT", "VRH_SPATIAL457_HUB"])
def test_the_rule_is_the_sources_rule(name):
    from vrh_lmms.tasks.common.sources import env_name

    key, part = re.fullmatch(r"VRH_(.+)_([A-Z]+)", name).groups()
    assert env_name(key, part) == name and data_env.is_data_variable(name)


def test_steering_and_patching_identities_hold_the_data_too(vrh_env, tmp_path):
    """Their manifests held no data at all: a steer or patch run resumed on other data mixed the two."""
    from vrh_lmms.runs.interventions.patch_run import PatchSpec
    from vrh_lmms.runs.interventions.steer_run import SteerSpec

    specs = (lambda: SteerSpec("m", "", ["vrh_refcoco_val"], None, []),
             lambda: PatchSpec("m", "", ["vrh_refcoco_val"], None))
    default = [spec().identity() for spec in specs]
    assert all("data" not in d and "sources" not in d for d in default)  # folders of earlier versions resume
    vrh_env.setenv("VRH_REFCOCO_DATA", str(tmp_path / "rows"))
    vrh_env.setenv("VRH_BOX_CONVENTION", "generic")
    for spec in specs:
        identity = spec().identity()
        assert identity["data"] == {"VRH_BOX_CONVENTION": "generic", "VRH_REFCOCO_DATA": str(tmp_path / "rows")}
        assert identity["sources"]["vrh_refcoco_val"]["from"] == "VRH_REFCOCO_DATA"
