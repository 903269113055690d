"""Put the `vrh` block (which heads were ablated, how) into results JSON written by the plain lmms-eval CLI.

lmms-eval 0.7.3 offers no hook for a model to add to its results (its `get_model_info` call is commented out), so
when a `vrh_*` model is constructed we wrap `EvaluationTracker.save_results_aggregated`, scoped to that run:
- the wrap adds the record only to results whose `config.model` names the vrh model that published it (its
  registered name, which the CLI passes, its class name or its checkpoint path: what lmms-eval writes there for a
  model given as an object), so a plain model's results never get one;
- the first results saved after it was installed end the run: the original method is put back and the record
  dropped (lmms-eval saves once per run, after the model is gone), and `uninstall()` does the same at any time.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Iterable, Iterator
from typing import Any

from vrh_lmms.model_wrappers.manifests import WRAPPERS

_RECORD: dict[str, Any] | None = None
_OWNERS: frozenset[str] = frozenset()
_ORIGINAL: Any = None  # the tracker's own method while the wrap is installed, else None


def publish_record(record: dict[str, Any], owners: Iterable[str | None] = ()) -> None:
    """The vrh block for the results of the model named by any of `owners` (besides the vrh model names)."""
    global _RECORD, _OWNERS
    _RECORD = copy.deepcopy(record)
    _OWNERS = frozenset(str(o) for o in owners if o)
    _install()


def current_record() -> dict[str, Any] | None:
    return copy.deepcopy(_RECORD)


def _is_vrh_model(name: Any) -> bool:
    if not isinstance(name, str):
        return False
    if name in _OWNERS:
        return True
    return name in WRAPPERS


def _install() -> None:
    global _ORIGINAL
    if _ORIGINAL is not None:
        return
    # deferred: keeps `vrh-lmms discover --help` free of lmms_eval
    from lmms_eval.loggers.evaluation_tracker import EvaluationTracker

    original = EvaluationTracker.save_results_aggregated

    @functools.wraps(original)
    def save_results_aggregated(self, results, samples, datetime_str):
        try:
            config = results.get("config") if isinstance(results, dict) else None
            if _RECORD is not None and isinstance(config, dict) and _is_vrh_model(config.get("model")):
                results["vrh"] = copy.deepcopy(_RECORD)
            return original(self, results, samples, datetime_str)
        finally:
            uninstall()

    _ORIGINAL = original
    EvaluationTracker.save_results_aggregated = save_results_aggregated


def uninstall() -> None:
    """Put lmms-eval's own method back and forget the record (nothing to do when no wrap is installed)."""
    global _ORIGINAL, _RECORD, _OWNERS
    if _ORIGINAL is not None:
        # deferred: keeps `vrh-lmms discover --help` free of lmms_eval
        from lmms_eval.loggers.evaluation_tracker import EvaluationTracker

        EvaluationTracker.save_results_aggregated = _ORIGINAL
    _ORIGINAL, _RECORD, _OWNERS = None, None, frozenset()


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """Whatever the block installs or publishes, the wrap is as it was before afterwards: installed with the same
    record, or not installed (the Python API evaluates without leaving a wrap that `vrh.load` had removed)."""
    global _ORIGINAL, _RECORD, _OWNERS
    state = (_ORIGINAL, _RECORD, _OWNERS)
    method = None
    if _ORIGINAL is not None:
        # deferred: keeps `vrh-lmms discover --help` free of lmms_eval
        from lmms_eval.loggers.evaluation_tracker import EvaluationTracker

        method = EvaluationTracker.save_results_aggregated
    try:
        yield
    finally:
        uninstall()
        if state[0] is not None:
            # deferred: keeps `vrh-lmms discover --help` free of lmms_eval
            from lmms_eval.loggers.evaluation_tracker import EvaluationTracker

            EvaluationTracker.save_results_aggregated = method
            _ORIGINAL, _RECORD, _OWNERS = state
