"""Two things lmms-eval does that the harness undoes, so that a bad doc is refused instead of passing or hiding.

- `lmms_eval/api/task.py` sets PIL's `ImageFile.LOAD_TRUNCATED_IMAGES = True` when it is imported, for the whole
  process: a truncated PNG then decodes with its missing rows filled in, silently. `restore_truncated_images` puts the
  flag back to what it was before that import (once; a caller may still set it afterwards).
- Its dataset download and `process_results` retry any exception 5 times (tenacity) and then raise a `RetryError`
  whose traceback names neither the doc nor the cause; `retry_unwrapped` raises the cause instead.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from PIL import ImageFile
from tenacity import RetryError

TASK_MODULE = "lmms_eval.api.task"  # the module that sets the flag on import
# the flag as it was before lmms-eval's import (None: lmms-eval was imported first, e.g. by the lmms-eval command line,
# whose own setting it then is)
_BEFORE: bool | None = None if TASK_MODULE in sys.modules else bool(ImageFile.LOAD_TRUNCATED_IMAGES)
_restored = False


def restore_truncated_images() -> None:
    """Once lmms-eval's task module is imported: PIL's truncated-image flag as it was before (once per process)."""
    global _restored
    if not _restored and _BEFORE is not None and TASK_MODULE in sys.modules:
        ImageFile.LOAD_TRUNCATED_IMAGES = _BEFORE
        _restored = True


@contextmanager
def retry_unwrapped() -> Iterator[None]:
    """Raise the last attempt's own exception where lmms-eval's tenacity retries end in a RetryError."""
    try:
        yield
    except RetryError as exc:
        cause = exc.last_attempt.exception() if exc.last_attempt is not None else None
        if cause is None:
            raise
        raise cause from None
