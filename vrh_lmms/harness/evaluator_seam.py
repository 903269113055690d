"""The one place the fast sweep engine (vrh_lmms.harness.sweep_engine) reaches into lmms-eval's evaluator module:
the functions it wraps for one sweep, among them a private one (`_thread_map_ordered`), checked against the release
named here.

`evaluator()` hands out `lmms_eval.evaluator` once its shape is what the engine was written for: every function
below present, and able to take the calls the evaluator and the engine make of it. A release that renamed or
reshaped one is refused in one line naming the function, before any model loads, instead of failing part way
through a sweep; `--engine lmms` (the plain evaluator, which patches nothing) runs on any release. `patched` swaps
functions of the module for the duration of a `with` block and always puts the originals back.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import metadata
from types import ModuleType
from typing import Any

from vrh_lmms.base.errors import VRHError

CHECKED_AGAINST = "0.7.3"  # the lmms-eval release whose evaluator these calls were read from
# function -> how it is called, by lmms-eval's evaluator and by the fast engine's wrappers: (positional arguments,
# keyword names) per call, as in lmms-eval CHECKED_AGAINST. A function that can no longer take one of them (renamed,
# reshaped or gone) breaks the engine; one that takes more (a wrapper's *args, **kwargs) does not.
SHAPE: dict[str, tuple[tuple[int, tuple[str, ...]], ...]] = {
    "get_task_dict": ((3, ()),),  # get_task_dict(task_name_list, task_manager, task_type)
    # _thread_map_ordered(process_document, docs, max_workers=..., on_complete=...); the engine's (f, items, 1, cb)
    "_thread_map_ordered": ((2, ("max_workers", "on_complete")), (4, ())),
    "get_git_commit_hash": ((0, ()),),
    "get_git_branch_name": ((0, ()),),
    "get_lmms_eval_version_string": ((0, ()),),
}


def _installed_version() -> str:
    try:
        return metadata.version("lmms-eval")
    except metadata.PackageNotFoundError:
        return "unknown"


def _call_text(name: str, positional: int, keywords: tuple[str, ...]) -> str:
    return f"{name}({', '.join(['_'] * positional + [f'{k}=...' for k in keywords])})"


def shape_errors(module: ModuleType | Any) -> list[str]:
    """What no longer fits between `module` and SHAPE: a missing function, or a call it cannot take."""
    errors = []
    for name, calls in SHAPE.items():
        function = getattr(module, name, None)
        if not callable(function):
            errors.append(f"{name} is gone")
            continue
        try:
            signature = inspect.signature(function)
        except (TypeError, ValueError):
            continue  # a builtin without a signature: nothing to compare
        for positional, keywords in calls:
            try:
                signature.bind(*range(positional), **dict.fromkeys(keywords))
            except TypeError:
                errors.append(f"{name}{signature} cannot take {_call_text(name, positional, keywords)}")
    return errors


def check_shape(module: ModuleType | Any, version: str | None = None) -> None:
    errors = shape_errors(module)
    if errors:
        raise VRHError(f"--engine fast was checked against lmms-eval {CHECKED_AGAINST}, and this lmms-eval "
                       f"({version or _installed_version()}) changed its evaluator: {'; '.join(errors)}; run the "
                       f"sweep with --engine lmms")


def evaluator() -> ModuleType:
    """lmms-eval's evaluator module, its shape checked (one line naming what changed)."""
    # deferred: keeps `vrh-lmms demo --help` free of lmms_eval
    from lmms_eval import evaluator as module

    check_shape(module)
    return module


@contextmanager
def patched(module: ModuleType | Any, **replacements: Callable) -> Iterator[dict[str, Callable]]:
    """Within the block, `module.<name>` is `replacements[name]`; yields the originals, restored on the way out."""
    unknown = sorted(set(replacements) - set(SHAPE))
    if unknown:
        raise VRHError(f"evaluator_seam.patched: {', '.join(unknown)} is not part of the checked seam")
    originals = {name: getattr(module, name) for name in replacements}
    for name, function in replacements.items():
        setattr(module, name, function)
    try:
        yield originals
    finally:
        for name, function in originals.items():
            setattr(module, name, function)
