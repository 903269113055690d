"""The fast engine's lmms-eval seam (vrh_lmms.harness.evaluator_seam): the installed evaluator has the shape it was
checked against, a changed one is refused in one line naming the function, and patches always come off."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from vrh_lmms.base.errors import VRHError
from vrh_lmms.harness import evaluator_seam, sweep_engine


def _module(**overrides):
    def get_task_dict(task_name_list, task_manager=None, task_type="simple"):
        return {}

    def _thread_map_ordered(function, items, max_workers, on_complete=None):
        return [function(i) for i in items]

    functions = {"get_task_dict": get_task_dict, "_thread_map_ordered": _thread_map_ordered,
                 "get_git_commit_hash": lambda: "c", "get_git_branch_name": lambda: "b",
                 "get_lmms_eval_version_string": lambda: "v"}
    return SimpleNamespace(**{k: v for k, v in (functions | overrides).items() if v is not None})


def test_the_installed_evaluator_has_the_checked_shape():
    from lmms_eval import evaluator

    assert evaluator_seam.shape_errors(evaluator) == []
    assert evaluator_seam.evaluator() is evaluator
    assert evaluator_seam.shape_errors(_module()) == []
    # a wrapper that takes anything (a profiler's, a test's spy) still fits
    assert evaluator_seam.shape_errors(_module(_thread_map_ordered=lambda *a, **k: [],
                                               get_task_dict=lambda *a, **k: {})) == []


def test_a_changed_evaluator_is_refused_in_one_line():
    def reshaped(fn, items, workers, on_complete=None):
        return []

    with pytest.raises(VRHError) as info:
        evaluator_seam.check_shape(_module(_thread_map_ordered=reshaped), version="9.9")
    message = str(info.value)
    assert "\n" not in message and "lmms-eval 0.7.3" in message and "(9.9)" in message
    assert "_thread_map_ordered(fn, items, workers, on_complete=None) cannot take " \
           "_thread_map_ordered(_, _, max_workers=..., on_complete=...)" in message
    assert "--engine lmms" in message
    with pytest.raises(VRHError, match="get_task_dict is gone"):
        evaluator_seam.check_shape(_module(get_task_dict=None), version="9.9")


def test_the_fast_engine_is_checked_before_it_runs(monkeypatch):
    from lmms_eval import evaluator

    assert sweep_engine.check_fast_engine("fast") and not sweep_engine.check_fast_engine("lmms")
    monkeypatch.delattr(evaluator, "_thread_map_ordered")
    with pytest.raises(VRHError, match="_thread_map_ordered is gone"):
        sweep_engine.check_fast_engine("fast")
    assert not sweep_engine.check_fast_engine("lmms")  # the plain evaluator patches nothing


def test_patched_restores_the_originals_even_on_error():
    module = _module()
    original = module._thread_map_ordered
    with pytest.raises(RuntimeError):
        with evaluator_seam.patched(module, _thread_map_ordered=lambda *a: []) as originals:
            assert originals["_thread_map_ordered"] is original and module._thread_map_ordered is not original
            raise RuntimeError
    assert module._thread_map_ordered is original
    with pytest.raises(VRHError, match="not part of the checked seam"):
        with evaluator_seam.patched(module, simple_evaluate=print):
            pass
