"""The lmms-eval adapter's task manager: our tasks alone when they suffice, lmms-eval's own otherwise."""

from __future__ import annotations

from vrh_lmms.harness import lmms


def test_our_tasks_alone_skip_lmms_evals_index():
    tm = lmms.task_manager(tasks=["vrh_synth_grounding"])
    assert "vrh_synth_grounding" in tm.all_tasks
    assert all(t.startswith(("vrh_", "_vrh")) for t in tm.all_tasks), [t for t in tm.all_tasks if "vrh" not in t][:5]


def test_a_builtin_task_brings_the_full_index():
    tm = lmms.task_manager(tasks=["vrh_synth_grounding", "mmstar"])
    assert {"vrh_synth_grounding", "mmstar"} <= set(tm.all_tasks)
