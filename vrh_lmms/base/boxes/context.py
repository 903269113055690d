"""Which box convention the running model speaks: resolved the same way by prompts and by scoring.

lmms-eval gives ``process_results`` no model name, so the convention has to come from process-wide state.
Precedence, highest first (``resolve``):

1. ``VRH_BOX_CONVENTION`` environment variable, ``name`` or ``name:key=value,key=value``
   (e.g. ``qwen2_5_vl:max_pixels=12845056``): the operator's override for this run.
2. ``box_convention`` (+ optional ``box_params`` dict) in the task's ``lmms_eval_specific_kwargs``: a task YAML
   (or a user's derived YAML) that deliberately pins a convention.
3. The *active* convention set by the model wrapper when it loads (``set_active``): the wrapper knows its family
   and its processor's resize limits exactly.
4. ``convention`` (+ params such as ``min_pixels``) in ``lmms_eval_specific_kwargs``: the task YAML's mapping of
   lmms-eval model names (``qwen2_5_vl: {convention: qwen2_5_vl}``), a guess from the ``--model`` name.
5. ``generic``.

Parameters of lower-priority sources that name the *same* convention fill in what the winner leaves out.
``doc_to_text`` resolves with the task kwargs and ``remember``s the result under the doc's key; ``process_results``
``recall``s it, so a reply is always read in the convention its prompt asked for.

The resize a backend really applies is read from the backend itself when it takes the doc's image
(``observe``, called by the grounding tasks' ``doc_to_visual``; ``vrh_lmms.base.boxes.backends``): ``for_scoring``
reads the reply with those parameters (source ``backend``) unless the operator or the task pinned the convention.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vrh_lmms.base.boxes.known import CONVENTIONS, get_convention

ENV_VAR = "VRH_BOX_CONVENTION"
DEFAULT = "generic"


@dataclass(frozen=True)
class Resolved:
    """A convention name, its parameters, and which source decided it (env/task/active/model/default)."""

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)
    source: str = "default"

    @property
    def convention(self):
        return get_convention(self.name)


_lock = threading.Lock()
_active: Resolved | None = None
_remembered: dict[str, Resolved] = {}
_observed: dict[str, Resolved] = {}


# ------------------------------------------------------------------------------------------- active state
def set_active(name: str, **params: Any) -> None:
    """Called by model wrappers on load: this process now evaluates a model speaking ``name``.

    Parameters the convention does not use (e.g. ``min_pixels`` for a 0-1000 family) are ignored, so wrappers may
    pass their processor settings unconditionally. Raises ValueError for an unknown convention name.
    """
    global _active
    conv = get_convention(name)
    with _lock:
        _active = Resolved(name, conv.merged_params(params) if params else {}, "active")


def clear_active() -> None:
    """Forget the active convention (a wrapper unloading, or tests)."""
    global _active
    with _lock:
        _active = None
        _remembered.clear()
        _observed.clear()


def get_active() -> Resolved | None:
    return _active


# ------------------------------------------------------------------------------------------- parsing specs
def _value(text: str) -> Any:
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text.strip()


def parse_spec(spec: str, origin: str = ENV_VAR) -> tuple[str, dict[str, Any]]:
    """``name`` or ``name:key=value,key=value`` -> (name, params); errors name ``origin`` and the bad part."""
    name, _, rest = spec.strip().partition(":")
    name = name.strip()
    if name not in CONVENTIONS:
        raise ValueError(f"{origin}={spec!r}: unknown box convention {name!r}; known: {', '.join(sorted(CONVENTIONS))}")
    params: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in rest.replace(";", ",").split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"{origin}={spec!r}: parameter {item!r} is not key=value")
        params[key.strip()] = _value(value)
    try:
        get_convention(name).merged_params(params, strict=True)
    except ValueError as exc:
        raise ValueError(f"{origin}={spec!r}: {exc}") from None
    return name, params


def _from_kwargs(kwargs: Mapping[str, Any] | None, name_key: str, params_key: str | None,
                 source: str) -> Resolved | None:
    if not kwargs or not kwargs.get(name_key):
        return None
    name = str(kwargs[name_key])
    conv = get_convention(name) if name in CONVENTIONS else None
    if conv is None:
        raise ValueError(f"lmms_eval_specific_kwargs.{name_key}={name!r}: unknown box convention; "
                         f"known: {', '.join(sorted(CONVENTIONS))}")
    if params_key:
        raw = kwargs.get(params_key) or {}
        if not isinstance(raw, Mapping):
            raise ValueError(f"lmms_eval_specific_kwargs.{params_key} must be a mapping, got {raw!r}")
        try:
            params = conv.merged_params(raw, strict=True)
        except ValueError as exc:
            raise ValueError(f"lmms_eval_specific_kwargs.{params_key}: {exc}") from None
    else:  # the model-name mapping keeps its params beside the name
        params = conv.merged_params({k: v for k, v in kwargs.items() if k in conv.params})
    return Resolved(name, params, source)


# ------------------------------------------------------------------------------------------- resolution
def resolve(task_kwargs: Mapping[str, Any] | None = None) -> Resolved:
    """The convention to prompt and score with, by the precedence in this module's docstring."""
    candidates: list[Resolved] = []
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        name, params = parse_spec(env)
        candidates.append(Resolved(name, params, "env"))
    task = _from_kwargs(task_kwargs, "box_convention", "box_params", "task")
    if task:
        candidates.append(task)
    if _active is not None:
        candidates.append(_active)
    model = _from_kwargs(task_kwargs, "convention", None, "model")
    if model:
        candidates.append(model)
    if not candidates:
        return Resolved(DEFAULT, dict(get_convention(DEFAULT).params), "default")
    winner = candidates[0]
    params: dict[str, Any] = dict(get_convention(winner.name).params)
    for cand in reversed(candidates):  # lower priority first, so the winner's own values land last
        if cand.name == winner.name:
            params.update(cand.params)
    return Resolved(winner.name, params, winner.source)


def remember(key: str, resolved: Resolved) -> None:
    """Note the convention a doc was prompted with (doc_to_text), for its scoring (process_results)."""
    with _lock:
        _remembered[key] = resolved


def recall(key: str) -> Resolved | None:
    with _lock:
        return _remembered.get(key)


def observe(key: str, name: str, params: Mapping[str, Any]) -> None:
    """The backend that took the doc's image resizes this way (``vrh_lmms.base.boxes.backends.backend_box_params``)."""
    with _lock:
        _observed[key] = Resolved(name, get_convention(name).merged_params(params), "backend")


def for_scoring(key: str | None) -> Resolved:
    """How to read the reply of doc ``key``: the convention its prompt used, with the resize parameters of the
    backend observed taking its image when that backend speaks the same convention (env/task pins win)."""
    with _lock:
        prompted = _remembered.get(key) if key else None
        seen = _observed.get(key) if key else None
    prompted = prompted or resolve(None)
    if seen is None or seen.name != prompted.name or prompted.source in ("env", "task"):
        return prompted
    return Resolved(prompted.name, {**prompted.params, **seen.params}, "backend")
