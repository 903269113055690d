"""Backends that turn a failed generate into an empty answer and only log the error (lmms-eval's mistral3_vl, the
llava_onevision1_5 chat backend): the wrapper raises it once the batch is done, so a broken run never reads as a
complete one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loguru import logger

from vrh_lmms.base.errors import VRHError


def generate_raising_logged_errors(model_id: str, module: str, error_of: Callable[[str], str | None],
                                   generate: Callable[[], Any], n_requests: int) -> Any:
    """Run `generate` while recording the ERROR lines `module` logs; `error_of(message)` is the error a line reports
    (None: not one). Any recorded error is raised after the batch, in one line naming how many requests failed."""
    errors: list[str] = []

    def record(message) -> None:
        if message.record["name"] == module and (error := error_of(message.record["message"])) is not None:
            errors.append(error)

    sink = logger.add(record, level="ERROR", format="{message}")
    try:
        out = generate()
    finally:
        logger.remove(sink)
    if errors:
        raise VRHError(f"{model_id}: generate failed on {len(errors)} of {n_requests} requests: {errors[0]}")
    return out
