"""The sweep command's collector pause: off during start-up, start-up's objects frozen once the model has loaded,
everything back as it was when the command ends (a process that goes on, e.g. a test's, collects them again)."""

from __future__ import annotations

import gc
import socket
import subprocess
import sys

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


EXIT_PROBE = """
import atexit, gc, sys
atexit.register(lambda: print("frozen at shutdown:", gc.get_freeze_count() > 0))  # runs after hooks made later
if sys.argv[1] == "cli":
    from vrh_lmms.cli import main
    main(["tasks-path"])  # any command that runs
elif sys.argv[1] == "rank":  # a rank of a multi-process run: its process group is torn down as usual
    import os
    import torch.distributed as dist
    from vrh_lmms.base import gc_startup
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2], RANK="0", WORLD_SIZE="1")
    dist.init_process_group("gloo")
    gc_startup.freeze_at_exit()
elif sys.argv[1] == "launched":  # a rank started by torchrun: WORLD_SIZE says so, whatever its group's state
    import os
    from vrh_lmms.cli import main
    os.environ["WORLD_SIZE"] = "2"
    main(["tasks-path"])
elif sys.argv[1] == "twice":
    from vrh_lmms.base import gc_startup
    gc_startup.freeze_at_exit(); gc_startup.freeze_at_exit()
    print("hooks:", atexit._ncallbacks())
"""


@pytest.mark.parametrize("how, frozen", [("cli", True), ("twice", True), ("none", False), ("rank", False),
                                                 ("launched", False)])
def test_the_shutdown_collections_skip_what_a_command_leaves(how, frozen):
    """A command's process freezes what is alive once its exit begins, so CPython's shutdown collections skip it
    (measured: ~1.1 s less teardown after importing torch, transformers and lmms-eval); a process that does not
    ask keeps the usual shutdown."""
    with socket.socket() as s:  # a free port for the rank's process group
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    out = subprocess.run([sys.executable, "-c", EXIT_PROBE, how, port], capture_output=True, text=True,
                         check=True).stdout
    assert f"frozen at shutdown: {frozen}" in out, out
    if how == "twice":
        assert "hooks: 2" in out  # the probe's and one freeze, however often it is asked
