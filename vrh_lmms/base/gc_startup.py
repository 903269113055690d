"""Python's cyclic garbage collector off while a command starts up, and told afterwards to skip what start-up built.

A sweep's start-up imports lmms-eval, transformers, torch and datasets: ~530,000 long-lived objects. CPython runs a
full collection each time the long-lived objects grow by a quarter, and each walks them all: 8 full collections,
~1 s of a 17 s demo sweep on 2 cores, which free a few hundred objects in all; the collection asked for at the end of
each pack (the backend's `clean`) walks them again (~0.3 s). So the command pauses collection until its model has
loaded (`paused`), then moves everything alive to the permanent generation (`gc.freeze`, the pattern Python's `gc`
documentation gives), which later collections skip, and collects again as usual. Nothing changes in what is
computed; the objects frozen stay alive until the command ends (modules, the model, the tasks: they would anyway).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_paused = False  # collection paused by `paused`, not yet resumed by `settle`
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
