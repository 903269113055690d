"""Put the `vrh` block (which heads were ablated, how) into results JSON written by the plain lmms-eval CLI.

lmms-eval 0.7.3 offers no hook for a model to add to its results (its `get_model_info` call is commented out), so
when a `vrh_*` model is constructed we wrap `EvaluationTracker.save_results_aggregated` once: it adds the record of
the most recently configured vrh model to the results dict just before it is written. Nothing changes for runs
that use no vrh model.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

_RECORD: dict[str, Any] | None = None
_INSTALLED = False


def publish_record(record: dict[str, Any]) -> None:
    global _RECORD
    _RECORD = copy.deepcopy(record)
    _install()


def current_record() -> dict[str, Any] | None:
    return copy.deepcopy(_RECORD)


def _install() -> None:
    global _INSTALLED
    if _INSTALLED:
        return
    from lmms_eval.loggers.evaluation_tracker import EvaluationTracker

    original = EvaluationTracker.save_results_aggregated

    @functools.wraps(original)
    def save_results_aggregated(self, results, samples, datetime_str):
        if _RECORD is not None and isinstance(results, dict):
            results["vrh"] = copy.deepcopy(_RECORD)
        return original(self, results, samples, datetime_str)

    EvaluationTracker.save_results_aggregated = save_results_aggregated
    _INSTALLED = True
