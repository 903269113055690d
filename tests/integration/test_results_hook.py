"""The `vrh` block reaches the results lmms-eval's own tracker saves for a vrh model, and nothing else: in one
process, a vrh model's run, then a plain lmms-eval model's run (both through lmms-eval's evaluator and tracker) on the
same tiny Qwen2.5-VL; after each, `EvaluationTracker.save_results_aggregated` is lmms-eval's own function again."""

from __future__ import annotations

import json

import pytest

PIXELS = 224 * 224


@pytest.fixture
def evaluate(tiny_qwen25, vrh_env, tmp_path):
    from lmms_eval.evaluator import simple_evaluate
    from lmms_eval.loggers.evaluation_tracker import EvaluationTracker
    from lmms_eval.tasks import TaskManager

    from vrh_lmms.base.paths import tasks_path

    vrh_env.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 2, "seed": 4}))
    manager = TaskManager(include_path=str(tasks_path()))
    common = f"pretrained={tiny_qwen25},device=cpu,device_map=cpu,min_pixels={PIXELS},max_pixels={PIXELS}"

    def run(model: str, extra: str, name: str, save: bool = True) -> dict | None:
        tracker = EvaluationTracker(output_path=str(tmp_path / name))
        results = simple_evaluate(model=model, model_args=f"{common},{extra}".rstrip(","),
                                  tasks=["vrh_synth_grounding"], limit=1, gen_kwargs="max_new_tokens=4",
                                  task_manager=manager, evaluation_tracker=tracker)
        if not save:
            return None
        tracker.save_results_aggregated(results=results, samples=None, datetime_str="now")
        (written,) = (tmp_path / name).rglob("*_results.json")
        return json.loads(written.read_text())

    return run


def test_a_plain_model_after_a_vrh_model_is_untouched(evaluate):
    from lmms_eval.loggers.evaluation_tracker import EvaluationTracker

    from vrh_lmms.model_wrappers import results_hook

    results_hook.uninstall()  # from lmms-eval's own method: an earlier test of this worker may have built a model
    own = EvaluationTracker.save_results_aggregated
    vrh = evaluate("vrh_qwen25", "heads=L0H1,dtype=float32", "vrh")
    assert vrh["vrh"]["ablation"]["heads"] == ["L0H1"] and vrh["vrh"]["family"] == "qwen2_5_vl"
    assert EvaluationTracker.save_results_aggregated is own  # the run is over: the wrap is gone
    plain = evaluate("qwen2_5_vl", "", "plain")
    assert "vrh" not in plain and plain["config"]["model"] == "qwen2_5_vl"
    assert EvaluationTracker.save_results_aggregated is own


def test_a_vrh_model_whose_results_were_not_saved_leaves_no_block(evaluate):
    """A vrh model built and evaluated without saving (the Python API, a sweep): the plain model saved next gets no
    block, and saving it ends the wrap."""
    from lmms_eval.loggers.evaluation_tracker import EvaluationTracker

    from vrh_lmms.model_wrappers import results_hook

    own = EvaluationTracker.save_results_aggregated
    evaluate("vrh_qwen25", "heads=L0H1,dtype=float32", "vrh", save=False)
    assert results_hook.current_record() is not None
    plain = evaluate("qwen2_5_vl", "", "plain")
    assert "vrh" not in plain
    assert EvaluationTracker.save_results_aggregated is own and results_hook.current_record() is None


def test_a_model_built_for_our_own_runs_leaves_no_wrap(tiny_qwen25, vrh_env):
    """Sweeps, discovery and the Python API build their model through vrh_lmms.harness.lmms.build_model and write
    their own results: nothing of lmms-eval's stays patched once the model is built."""
    from lmms_eval.loggers.evaluation_tracker import EvaluationTracker

    from vrh_lmms.harness import lmms

    own = EvaluationTracker.save_results_aggregated
    lm = lmms.build_model("vrh_qwen25", f"pretrained={tiny_qwen25},device=cpu,device_map=cpu,heads=L0H1,"
                                        f"dtype=float32,min_pixels={PIXELS},max_pixels={PIXELS}")
    assert lm.vrh_headset.names == ["L0H1"]
    assert EvaluationTracker.save_results_aggregated is own
