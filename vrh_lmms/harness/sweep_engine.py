"""The sweep's evaluation engines: `fast` (the default) and `lmms` (the reference), which write identical files.

On the harness floor: `fast` changes how lmms-eval's evaluator builds tasks and feeds the backend, for one sweep.

Both evaluate each configuration with lmms-eval's own evaluator (`simple_evaluate`: the task's prompts, its
`process_results` and aggregation, lmms-eval's sample records), so every file is lmms-eval's by construction. `lmms`
rebuilds everything per configuration, as a plain `lmms-eval` run would. `fast` does the work that does not depend on
the head set once per sweep instead of once per configuration:

- the task dict (dataset load, `process_docs`, YAML) is built by the first evaluator pass and handed to the others
  (`task_dict_once`, which also asks git for lmms-eval's version once); each pass still configures the tasks and
  rebuilds its requests from the docs, so prompts and doc ids are the same;
- the answers of a pack are generated before its evaluator passes (`generate_ahead`): a dry pass, which scores
  nothing, records the model calls the docs make, which then run for all the pack's configurations, several calls'
  rows stacked in one generate where their prompts are of equal length (no padding, so each answer is the one its
  own batch would give; rows per generate: `rows_limit` in vrh_lmms.runs.sweep.run); each configuration's pass gets
  its answers back;
- the docs the backend reads are decoded once (`rows_once`: the dataset's image column is decoded on every read),
  and so are the docs each pass's requests and scoring iterate over (`task_dict_once` hands out tasks whose splits
  keep their rows: `_Rows`, shared with the backend's);
- the processor's output for a batch of docs (tokenising, resizing, normalising and patching the images) is kept
  from the first pass of a pack and handed back, keyed by the full content of the call (`InputsOnce`); a later
  pass's `generate_until` with the same requests gets the processor's outputs and the chat templates in the order
  the first made them, without hashing pixels or rendering templates again (`InputsOnce.begin`, `request_key`);
- the backend's `accelerator.unwrap_model`, asked on every `lm.model`, answers once (`unwrap_once`).

Everything kept (decoded docs, the processor's outputs, the task's doc messages) is charged to one byte budget per
sweep (`CacheBudget`, `VRH_SWEEP_CACHE`, default 4 GiB): what does not fit is not kept and is computed again where it
is read, so the budget changes memory and time, never an answer. A pack's processor outputs and doc messages are
given back to it when the pack ends; decoded docs stay for the sweep.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from vrh_lmms.base.errors import VRHError
from vrh_lmms.harness import evaluator_seam

ENGINES = ("fast", "lmms")
DEFAULT_ENGINE = "fast"
# the bytes the fast engine may keep for a sweep: decoded docs (an image's pixels: ~1 MB at 640x480, 19 MB at
# 2500x2500), a pack's processor outputs (~7 MB a doc on a 7B VLM at 640x480) and doc messages. Beyond it what is
# read is computed again: the demo's 100 scenes fit many times over, a RefCOCO split on a 7B VLM does not.
CACHE_ENV = "VRH_SWEEP_CACHE"
DEFAULT_CACHE_BYTES = 4 << 30
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def check_engine(name: str) -> str:
    if name not in ENGINES:
        raise VRHError(f"--engine {name!r}: use {' or '.join(ENGINES)}")
    return name


def cache_bytes(value: str | None = None) -> int:
    """The fast engine's cache budget in bytes: `value` (else `$VRH_SWEEP_CACHE`, else 4 GiB), a number of bytes
    with an optional binary unit (`512M`, `4G`, `1.5GiB`; `0` keeps nothing)."""
    text = os.environ.get(CACHE_ENV) if value is None else value
    if text is None or not text.strip():
        return DEFAULT_CACHE_BYTES
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", text, flags=re.IGNORECASE)
    if match is None:
        raise VRHError(f"{CACHE_ENV}={text!r}: expected a size in bytes such as 4G, 512M or 0")
    return int(float(match[1]) * _UNITS[match[2].upper()])


class CacheBudget:
    """The bytes the fast engine's caches may still take (one budget per sweep, shared by all of them)."""

    def __init__(self, limit: int = DEFAULT_CACHE_BYTES) -> None:
        self.limit, self.used, self.refused = limit, 0, 0

    def take(self, size: int) -> bool:
        """Whether `size` more bytes fit; if so they are counted as used."""
        if self.used + size > self.limit:
            self.refused += 1
            return False
        self.used += size
        return True

    def give_back(self, size: int) -> None:
        self.used -= size


def value_bytes(value: Any) -> int:
    """Memory held by a decoded doc, a processor output or a doc's messages, as the caches charge it: images by
    their decoded pixels, arrays and tensors by their buffers, text by its length; containers by their items."""
    # deferred: keeps `vrh-lmms demo --help` free of PIL, numpy, torch
    from vrh_lmms.model.packing import tensor_bytes

    if isinstance(value, (str, bytes, bytearray)):
        return len(value)
    if isinstance(value, dict):
        return sum(value_bytes(k) + value_bytes(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return sum(value_bytes(v) for v in value)
    size = getattr(value, "size", None)
    bands = getattr(value, "getbands", None)
    if callable(bands) and isinstance(size, tuple) and len(size) == 2:  # a PIL image
        mode = getattr(value, "mode", "")
        per_band = 4 if mode in ("I", "F") else 2 if mode.startswith("I;16") else 1
        return size[0] * size[1] * len(bands()) * per_band
    if hasattr(value, "nbytes") and isinstance(getattr(value, "nbytes"), int):  # a numpy array
        return value.nbytes
    tensors = tensor_bytes(value)
    if tensors:
        return tensors
    return sys.getsizeof(value)


@contextmanager
def task_dict_once(budget: CacheBudget | None = None) -> Iterator[None]:
    """While active, lmms-eval's evaluator builds a task dict for the same task names and manager only once.

    Every evaluator pass still configures the tasks (generation kwargs, few-shot seed) and rebuilds its requests
    from the docs, which is all a second `get_task_dict` would have changed. The tasks' splits keep their rows
    (`keep_rows`): every pass builds its requests from, and scores, the docs the first pass decoded."""
    module = evaluator_seam.evaluator()
    original = module.get_task_dict
    built: dict[tuple, Any] = {}

    def once(task_name_list, task_manager=None, task_type="simple"):
        names = [task_name_list] if isinstance(task_name_list, str) else list(task_name_list)
        if not all(isinstance(n, str) for n in names):
            return original(task_name_list, task_manager, task_type)
        key = (tuple(names), id(task_manager), task_type)
        if key not in built:
            built[key] = original(task_name_list, task_manager, task_type)
            keep_rows(built[key], budget)
        return built[key]

    # asked of git (subprocesses) on every pass; the same answer all sweep long
    asked = ("get_git_commit_hash", "get_git_branch_name", "get_lmms_eval_version_string")
    with evaluator_seam.patched(module, get_task_dict=once,
                                **{name: functools.cache(getattr(module, name)) for name in asked}):
        yield


def keep_rows(task_dict: dict, budget: CacheBudget | None = None) -> None:
    """Every task in `task_dict` (groups included) reads its splits through `_Rows`: the first read of a doc decodes
    it (its images included), later reads and iterations hand back that row. lmms-eval's evaluator iterates the
    docs with their images to score every pass (`Task.doc_iterator`) and without them to build its requests
    (`eval_docs_no_media`); both are kept, within `budget`."""
    budget = CacheBudget() if budget is None else budget
    for task in task_dict.values():
        if isinstance(task, dict):
            keep_rows(task, budget)
            continue
        for name in ("dataset", "dataset_no_image"):
            splits = getattr(task, name, None)
            if isinstance(splits, dict):
                for split in list(splits):
                    if not isinstance(splits[split], _Rows):
                        splits[split] = _Rows(splits[split], budget)


@contextmanager
def scoring_in_thread() -> Iterator[None]:
    """While active, lmms-eval's evaluator scores each pass's docs in the calling thread rather than in its pool
    of `process_docs_parallel` threads. For our own tasks (scoring in plain Python, which the GIL runs one thread
    at a time) the pool only adds its hand-offs: ~0.4 s of CPU over the demo's 22 passes. lmms-eval returns the
    scores in doc order either way, so scores, samples and results.json (which records the threads asked for) are
    the same."""
    module = evaluator_seam.evaluator()
    original = module._thread_map_ordered

    def in_thread(function, items, max_workers, on_complete=None):
        return original(function, items, 1, on_complete)

    with evaluator_seam.patched(module, _thread_map_ordered=in_thread):
        yield


@contextmanager
def fast_session(lm: Any, own_tasks: bool, budget: CacheBudget | None = None) -> Iterator[None]:
    """The fast engine's wrappers for one sweep, on `lm`: the task dict, the backend's docs and unwrapped model once,
    and (for our own tasks, `own_tasks`) scoring in the calling thread; the caches share `budget`."""
    with task_dict_once(budget), rows_once(lm, budget), unwrap_once(lm), \
            scoring_in_thread() if own_tasks else contextlib.nullcontext():
        yield


def check_fast_engine(name: str) -> bool:
    """Whether `name` is the fast engine, whose lmms-eval seam is checked here (call it once the cheap checks have
    passed and before any model loads: it imports lmms-eval's evaluator)."""
    if check_engine(name) != "fast":
        return False
    evaluator_seam.evaluator()
    return True


@contextmanager
def unwrap_once(lm: Any) -> Iterator[None]:
    """While active, the backend's `accelerator.unwrap_model` (asked on every access of `lm.model`, ~2 ms each for
    its package probes) answers from the first call for the same model object and arguments."""
    accelerator = getattr(lm, "accelerator", None)
    unwrap = getattr(accelerator, "unwrap_model", None)
    if unwrap is None or "unwrap_model" in vars(accelerator):
        yield
        return
    known: dict[tuple, Any] = {}

    def once(model, *args, **kwargs):
        key = (id(model), args, tuple(sorted(kwargs.items())))
        if key not in known:
            known[key] = (model, unwrap(model, *args, **kwargs))
        return known[key][1]

    accelerator.unwrap_model = once
    try:
        yield
    finally:
        vars(accelerator).pop("unwrap_model", None)


class InputsOnce:
    """Stands in for a backend's `processor`: the first call with some content runs the processor, a later call
    with exactly the same content (texts, images, every argument) gets the same output back. Everything else
    (tokenizer, batch_decode) is the processor's own.

    Replayed calls: between `begin(key)` and `end()` (one backend `generate_until`, `key` its requests:
    `request_key`), the processor calls and chat templates are recorded in order; when a later `generate_until`
    gets the same requests (every later pass of a pack), the backend makes the same calls in the same order on the
    same docs, so each is answered from the record without hashing its pixels or rendering its template. Each
    replayed call is still checked against its record by everything but pixel bytes (texts, arguments, image sizes);
    the first that differs ends the replay, and it and the calls after it are computed as usual."""

    def __init__(self, processor: Any, budget: CacheBudget | int | None = None) -> None:
        budget = CacheBudget(budget) if isinstance(budget, int) else CacheBudget() if budget is None else budget
        self.__dict__.update(_processor=processor, _kept={}, _budget=budget, _used=0, hits=0, misses=0,
                             replayed=0, _scripts={}, _recording=None, _replay=None, _cursor=0,
                             _docs=None)

    def _take(self, size: int) -> bool:
        """Charge `size` bytes kept by this pack to the sweep's budget, if they fit."""
        if not self._budget.take(size):
            return False
        self.__dict__["_used"] = self._used + size
        return True

    def release(self) -> None:
        """The pack ended: what it kept goes, and its bytes go back to the budget."""
        self._budget.give_back(self._used)
        self.__dict__.update(_kept={}, _scripts={}, _used=0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._processor, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._processor, name, value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # deferred: keeps `vrh-lmms demo --help` free of torch
        from vrh_lmms.model.packing import fingerprint, tensor_bytes

        shape = self._shape("call", args, kwargs)
        found = self._next(shape)
        if found is not _ABSENT:
            self.__dict__["hits"] += 1
            return found
        key = fingerprint(args, kwargs)  # exact content: texts, images, every argument
        if key in self._kept:
            self.__dict__["hits"] += 1
            self._record(shape, self._kept[key])
            return self._kept[key]
        self.__dict__["misses"] += 1
        out = self._processor(*args, **kwargs)
        if self._take(tensor_bytes(out)):
            self._kept[key] = out
            self._record(shape, out)
        else:  # not kept: a later pass cannot be answered from this record
            self._record(shape, _ABSENT)
        return out

    def apply_chat_template(self, *args: Any, **kwargs: Any) -> Any:
        shape = self._shape("template", args, kwargs)
        found = self._next(shape)
        if found is not _ABSENT:
            return list(found) if isinstance(found, list) else found
        out = self._processor.apply_chat_template(*args, **kwargs)
        self._record(shape, list(out) if isinstance(out, list) else out)
        return out

    # ------------------------------------------------------------------------------------ replayed calls
    def begin(self, key: tuple | None) -> None:
        """A backend `generate_until` with requests `key` starts (None: requests that cannot be compared)."""
        script = self._scripts.get(key) if key is not None else None
        if script is not None and script["complete"]:
            self.__dict__.update(_replay=script["calls"], _cursor=0, _recording=None, _docs=script["docs"])
            return
        recording = None
        if key is not None:
            recording = self._scripts[key] = {"calls": [], "complete": False, "docs": {}}
        self.__dict__.update(_replay=None, _recording=recording, _docs=recording["docs"] if recording else None)

    def docs_once(self, requests: list) -> list:
        """`requests` (after `begin`) with each callable argument (the task's `doc_to_messages` or `doc_to_visual`)
        answering from the record when it is asked about the very doc object it was asked about in the recorded
        pass (the docs are decoded once per sweep: `rows_once`), and recording otherwise. Shallow copies."""
        docs = self.__dict__.get("_docs")
        if docs is None:
            return requests
        out = []
        for i, request in enumerate(requests):
            args = list(request.args)
            for j, arg in enumerate(args):
                if callable(arg):
                    args[j] = _doc_once(arg, docs, (i, j), self)
            clone = copy.copy(request)
            clone.arguments = tuple(args)
            out.append(clone)
        return out

    def end(self, complete: bool = True) -> None:
        """That `generate_until` returned (`complete`) or raised: what it recorded is used from now on, or not."""
        if self._recording is not None:
            self._recording["complete"] = complete and _ABSENT not in (out for _, out in self._recording["calls"])
        self.__dict__.update(_replay=None, _recording=None, _docs=None)

    @staticmethod
    def _shape(kind: str, args: tuple, kwargs: dict[str, Any]) -> str:
        # deferred: keeps `vrh-lmms demo --help` free of torch
        from vrh_lmms.model.packing import fingerprint

        return kind + fingerprint(args, kwargs, pixels=False)

    def _next(self, shape: str) -> Any:
        calls = self._replay
        if calls is None:
            return _ABSENT
        if self._cursor < len(calls) and calls[self._cursor][0] == shape:
            self.__dict__["_cursor"] += 1
            self.__dict__["replayed"] += 1
            return calls[self._cursor - 1][1]
        self.__dict__["_replay"] = None  # the backend went another way: compute the rest of this call as usual
        return _ABSENT

    def _record(self, shape: str, out: Any) -> None:
        if self._recording is not None:
            self._recording["calls"].append((shape, out))


_ABSENT = object()  # no recorded answer


def _doc_once(function: Callable, docs: dict, slot: tuple[int, int], memo: InputsOnce) -> Callable:
    def once(doc, *args, **kwargs):
        kept = docs.get(slot)
        if kept is not None and kept[0] is doc and not args and not kwargs:
            return kept[1]
        out = function(doc, *args, **kwargs)
        if not args and not kwargs and memo._take(value_bytes(out)):  # else asked again on the next pass
            docs[slot] = (doc, out)
        return out

    return once


def request_key(requests: Any) -> tuple | None:
    """What a backend's `generate_until` consumes, comparable across passes: every request's arguments (context,
    generation kwargs, doc id, task, split), its callables (the task's `doc_to_visual` or `doc_to_messages`, bound
    to the same task object on every pass) as themselves. None: an argument that cannot be compared."""
    key = []
    try:
        for request in requests:
            parts = []
            for arg in request.args:
                if callable(arg):
                    hash(arg)
                    parts.append(arg)
                elif isinstance(arg, (str, int, float, bool, type(None))):
                    parts.append((type(arg).__name__, arg))
                elif isinstance(arg, (dict, list, tuple)):
                    parts.append(("repr", repr(arg)))
                else:
                    return None
            key.append(tuple(parts))
    except (TypeError, AttributeError):
        return None
    return tuple(key)


def generate_ahead(pack: Any, dry_pass: Callable[[], Any], rows_for: Callable[[int], int]) -> None:
    """Make every answer of a pack before its evaluator passes: `dry_pass` (an evaluator pass ended once its model
    calls are made, before any doc is scored: `lmms.generate`) records the generate calls the docs make, which then
    run for all the pack's configurations, several calls per generate (vrh_lmms.model.packing
    `PackedGenerate.collect`), in windows of bounded memory. The passes that follow replay them."""
    pack.collect(rows_for)
    dry_pass()
    pack.generate_collected()


class _Rows:
    """One split of a task's dataset, as the backend and the evaluator read it (`rows[doc_id]`, `iter(rows)`): each
    row decoded once (images included) and kept while the budget allows (a row that does not fit is decoded on each
    read, as the dataset itself does); everything else is the dataset's own."""

    def __init__(self, split: Any, budget: CacheBudget) -> None:
        self.__dict__.update(_split=split, _kept={}, _budget=budget)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._split, name)

    def __len__(self) -> int:
        return len(self._split)

    def __iter__(self) -> Iterator[Any]:
        # by index, so a pass that stops early (`--limit`) decodes no more than it reads
        return (self[i] for i in range(len(self._split)))

    def __getitem__(self, index: Any) -> Any:
        if not isinstance(index, int):
            return self._split[index]
        if index in self._kept:
            return self._kept[index]
        row = self._split[index]
        if self._budget.take(value_bytes(row)):
            self._kept[index] = row
        return row


class _TaskRows(dict):
    """Stands in for a backend's `task_dict` (task -> its dataset's splits, which lmms-eval's evaluator fills on
    every pass): the backend's reads of a doc decode it once per sweep rather than once per configuration."""

    def __init__(self, original: dict, budget: CacheBudget) -> None:
        super().__init__()
        self._budget = budget
        self._wrapped: dict[int, tuple[Any, dict[str, _Rows]]] = {}
        for key, value in original.items():
            self[key] = value

    def __setitem__(self, task: Any, splits: Any) -> None:
        if not hasattr(splits, "keys"):  # not a dataset's splits: as it is
            super().__setitem__(task, splits)
            return
        kept = self._wrapped.get(id(splits))
        if kept is None or kept[0] is not splits:  # the same dataset object on every pass: one cache per split
            rows = {name: s if isinstance(s, _Rows) else _Rows(s, self._budget) for name, s in splits.items()}
            kept = self._wrapped[id(splits)] = (splits, rows)
        super().__setitem__(task, kept[1])


@contextmanager
def rows_once(lm: Any, budget: CacheBudget | None = None) -> Iterator[None]:
    """While active, the docs the backend reads (`lm.task_dict[task][split][doc_id]`) are decoded once (within
    `budget`)."""
    original = getattr(lm, "task_dict", None)
    if not isinstance(original, dict) or isinstance(original, _TaskRows):
        yield
        return
    lm.task_dict = _TaskRows(original, CacheBudget() if budget is None else budget)
    try:
        yield
    finally:
        lm.task_dict = original


# Where lmms-eval 0.7.3's backends keep their processor: most as `processor`, llava_hf (LLaVA-1.5, -NeXT,
# -OneVision) as `_image_processor`, idefics2 (Idefics3 / SmolVLM) as `_processor`; the latter two only on the instance.
PROCESSOR_ATTRS = ("processor", "_image_processor", "_processor")


def _processor_attr(lm: Any) -> str | None:
    for name in PROCESSOR_ATTRS:
        if name != "processor" and name not in vars(lm):
            continue
        found = getattr(lm, name, None)
        if found is not None and callable(found):
            return None if isinstance(found, InputsOnce) else name
    return None


@contextmanager
def inputs_once(lm: Any, budget: CacheBudget | None = None) -> Iterator[InputsOnce | None]:
    """While active, the backend's processor (`lm.processor`, or where lmms-eval's backend keeps it:
    `PROCESSOR_ATTRS`) keeps its outputs for reuse (`InputsOnce`, within `budget`, which gets them back at the end),
    and each `lm.generate_until` records or replays its processor calls and chat templates by its requests."""
    attr = _processor_attr(lm)
    if attr is None:
        yield None
        return
    processor = getattr(lm, attr)
    memo = InputsOnce(processor, budget)
    had = attr in vars(lm)
    setattr(lm, attr, memo)
    generate_until = getattr(lm, "generate_until", None)
    wrap = callable(generate_until) and "generate_until" not in vars(lm)
    if wrap:
        def replaying(requests, *args, **kwargs):
            memo.begin(request_key(requests))
            try:
                out = generate_until(memo.docs_once(requests), *args, **kwargs)
            except BaseException:
                memo.end(complete=False)
                raise
            memo.end()
            return out

        lm.generate_until = replaying
    try:
        yield memo
    finally:
        memo.release()
        if wrap:
            vars(lm).pop("generate_until", None)
        if had:
            setattr(lm, attr, processor)
        else:
            vars(lm).pop(attr, None)
