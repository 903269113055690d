"""Python's cyclic garbage collector off while a command starts up, told afterwards to skip what start-up built, and
kept off the objects that remain when the process exits (`freeze_at_exit`).

A sweep's start-up imports lmms-eval, transformers, torch and datasets: ~530,000 long-lived objects. CPython runs a
full collection each time the long-lived objects grow by a quarter, and each walks them all: 8 full collections,
~1 s of a 17 s demo sweep on 2 cores, which free a few hundred objects in all; the collection asked for at the end of
each pack (the backend's `clean`) walks them again (~0.3 s). So the command pauses collection until its model has
loaded (`paused`), then moves everything alive to the permanent generation (`gc.freeze`, the pattern Python's `gc`
documentation gives), which later collections skip, and collects again as usual. Nothing changes in what is
computed; the objects frozen stay alive until the command ends (modules, the model, the tasks: they would anyway).
"""

from __future__ import annotations

import atexit
import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager

_paused = False  # collection paused by `paused`, not yet resumed by `settle`
_exit_registered = False  # `freeze_at_exit` has registered its atexit hook
_frozen = False  # objects frozen by `settle` within the current `paused`


@contextmanager
def paused() -> Iterator[None]:
    """While active (a command's whole run): collection off until `settle`; at the end collection is on again and
    what `settle` froze goes back to the collector (so a process that goes on, a test's, keeps collecting it)."""
    global _paused, _frozen
    if not gc.isenabled():  # someone else's choice: leave it alone
        yield
        return
    gc.disable()
    _paused, _frozen = True, False
    try:
        yield
    finally:
        if _frozen:
            gc.unfreeze()
        _paused, _frozen = False, False
        gc.enable()


def settle() -> None:
    """Start-up is over (the model has loaded): freeze what is alive, collect again. Outside `paused`: nothing."""
    global _paused, _frozen
    if not _paused:
        return
    gc.freeze()
    _paused, _frozen = False, True
    gc.enable()


def freeze_at_exit() -> None:
    """When the interpreter exits, move everything still alive to the permanent generation first.

    CPython's shutdown runs full collections over every object the process holds while it clears the modules:
    ~1.1 s of a 2-core machine for the ~520,000 objects torch, transformers and lmms-eval leave (0.25 s with them
    frozen; measured on an import of the three and exit). Frozen objects are still freed by reference counting as
    the modules go; only cyclic garbage among them is left to the operating system, whose memory it is about to
    reclaim anyway, and a cycle's `__del__` does not run (CPython does not promise to run it at exit either: the
    commands close their files themselves). Registered once per process; atexit hooks run last-in first-out, so
    hooks registered later (lmms-eval's, a test's) run before the freeze. The CLI does not ask in a rank of a
    multi-process run, and a process group still up at exit skips it."""
    global _exit_registered
    if not _exit_registered:
        atexit.register(_freeze_unless_distributed)
        _exit_registered = True


def _freeze_unless_distributed() -> None:
    """`gc.freeze`, unless a process group is still up: its teardown is left to the usual shutdown, untried with a
    freeze. (The CLI closes a rank's group itself before it exits: vrh_lmms.harness.distributed.close_group.)"""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return
    gc.freeze()
