"""The sweep command's collector pause: off during start-up, start-up's objects frozen once the model has loaded,
everything back as it was when the command ends (a process that goes on, e.g. a test's, collects them again)."""

from __future__ import annotations

import gc

import pytest

from vrh_lmms.base import gc_startup


@pytest.fixture(autouse=True)
def _collector_restored():
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if enabled else gc.disable)()


def test_paused_until_settled_then_frozen_then_restored():
    gc.enable()
    gc.unfreeze()
    with gc_startup.paused():
        assert not gc.isenabled()
        gc_startup.settle()
        assert gc.isenabled()
        assert gc.get_freeze_count() > 0  # what start-up built is skipped by later collections
        cycle: list = []
        cycle.append(cycle)  # made after settle: still collected
        del cycle
        assert gc.collect() >= 1
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_collection_comes_back_when_the_model_never_loads():
    gc.enable()
    with pytest.raises(RuntimeError):
        with gc_startup.paused():
            raise RuntimeError("a check failed before the model loaded")
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_settle_outside_a_pause_freezes_nothing():
    """run_sweep called from the API or a test: no pause was asked, so nothing is frozen."""
    gc.enable()
    gc.unfreeze()
    gc_startup.settle()
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_a_collector_someone_else_turned_off_stays_off():
    gc.disable()
    with gc_startup.paused():
        gc_startup.settle()
        assert not gc.isenabled()
    assert not gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_the_sweep_command_runs_paused(monkeypatch):
    from vrh_lmms.cli.commands import sweep

    seen = []
    monkeypatch.setattr(sweep, "_run", lambda args: seen.append(gc.isenabled()) or 0)
    gc.enable()
    assert sweep.run(None) == 0
    assert seen == [False] and gc.isenabled()
