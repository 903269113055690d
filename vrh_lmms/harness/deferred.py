"""Modules lmms-eval imports at start-up that our commands never use, loaded on their first use instead.

lmms-eval's metric registry imports Hugging Face `evaluate` (`import evaluate as hf_evaluate`) for the rare task
whose metric is an `evaluate` metric; `evaluate` in turn imports transformers' pipelines, scipy.stats and its own
evaluator suite (~2 s of a 2-core CPU before a sweep's model loads, more when the machine is busy). `defer` puts a
stand-in module in `sys.modules` before lmms-eval is imported: it answers what the import system and module walkers
ask (`__file__`, `__spec__`, `__path__`, ...) and runs the real module, in place, the first time any other attribute
is read, so `hf_evaluate.load(...)` behaves exactly as before. Where the module was imported already (the
`lmms-eval` CLI imports it before loading our plugin), nothing changes.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import types
from typing import Any

DEFERRED = ("evaluate",)


class _Deferred(types.ModuleType):
    """A module not yet run: dunder attributes come from its spec, any other attribute runs it first."""

    _lock = threading.RLock()

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            return super().__getattribute__(name)
        load(self)
        return getattr(self, name)


def load(module: types.ModuleType) -> types.ModuleType:
    """Run a deferred module in place (once); any other module is returned as it is."""
    with _Deferred._lock:
        if type(module) is _Deferred:
            module.__class__ = types.ModuleType
            try:
                module.__spec__.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(module.__name__, None)  # a failed import leaves no half module behind, as usual
                raise
    return module


def defer(name: str) -> bool:
    """Stand in for module `name` until its first use; False where it is imported already or not installed."""
    if name in sys.modules:
        return False
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        return False
    module = importlib.util.module_from_spec(spec)
    module.__class__ = _Deferred
    sys.modules[name] = module
    return True


def defer_unused() -> None:
    """`defer` every module in DEFERRED (done before the harness imports lmms-eval)."""
    for name in DEFERRED:
        defer(name)
