"""Thin adapter over lmms-eval: build a `vrh_*` model, a TaskManager that sees our tasks, run the evaluator,
and write results in lmms-eval's own file formats. The rest of the core stays free of lmms-eval imports."""

from __future__ import annotations

import importlib.util
import inspect
import json
import math
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from vrh_lmms.base import atomic
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.paths import tasks_path
from vrh_lmms.harness import distributed
from vrh_lmms.harness.lmms_quirks import restore_truncated_images, retry_unwrapped
from vrh_lmms.model.device import default_device, default_device_map
from vrh_lmms.model_wrappers import results_hook


def build_model(model: str, model_args: str, batch_size: int = 1, extra_args: dict[str, Any] | None = None):
    """Instantiate a registered `vrh_*` model; its name and checkpoint path are checked before any weight loads."""
    # deferred: keeps `vrh-lmms eval --help` free of filelock
    from vrh_lmms.harness.preload import check_pretrained, constructor_default, model_class, parse_model_args

    cls = model_class(model)
    check_pretrained(parse_model_args(model_args).get("pretrained", constructor_default(cls, "pretrained")))
    args = dict(extra_args or {})
    args["batch_size"] = batch_size
    lm = cls.create_from_arg_string(model_args or "", args)
    restore_truncated_images()
    lm.vrh_keep_loaded = True  # one load serves every configuration
    # Our runs write their results with the model's record themselves (`write_run`): the tracker wrap that puts it
    # into plain lmms-eval CLI runs' files is not needed here, and would outlive the run (nothing saves through it).
    results_hook.uninstall()
    return lm


def task_manager(model_name: str | None = None, include_path: str | list[str] | None = None,
                 tasks: list[str] | None = None):
    """A TaskManager that sees our tasks (and `include_path`). When every name in `tasks` is found there, lmms-eval's
    own ~6,500 task YAMLs are not indexed at all (that indexing alone takes ~10 s per manager on 2 cores)."""
    # deferred: keeps `vrh-lmms eval --help` free of lmms_eval
    from lmms_eval.tasks import TaskManager

    restore_truncated_images()
    paths = [str(tasks_path())]
    if include_path:
        paths += [include_path] if isinstance(include_path, str) else list(include_path)
    if tasks:
        ours = TaskManager("WARNING", include_path=paths, include_defaults=False, model_name=model_name)
        if set(tasks) <= set(ours.all_tasks):
            return ours
    return TaskManager("WARNING", include_path=paths, model_name=model_name)


def own_tasks(tm, tasks: list[str]) -> bool:
    """Whether every one of `tasks` (a task or group name) is defined in our task folder: tasks whose scoring is
    local Python, which lmms-eval's scoring threads cannot speed up (the GIL) but do slow down."""
    root = Path(tasks_path()).resolve()
    for task in tasks:
        path = (getattr(tm, "task_index", None) or {}).get(task, {}).get("yaml_path")
        if not isinstance(path, str) or not Path(path).resolve().is_relative_to(root):
            return False
    return True


def leaf_tasks(tm, task: str):
    """(name, task object) of every task `task` names (itself, or each task of a group): lmms-eval's own objects,
    their datasets loaded and `process_docs` applied."""
    # deferred: keeps `vrh-lmms eval --help` free of lmms_eval
    from lmms_eval.tasks import get_task_dict

    restore_truncated_images()
    with retry_unwrapped():  # a doc that fails to load names its own error, not a RetryError
        stack = [get_task_dict([task], tm)]
    while stack:
        for name, value in stack.pop().items():
            if isinstance(value, dict):
                stack.append(value)
            elif hasattr(value, "eval_docs"):
                yield str(name), value


def count_docs(tm, tasks: list[str], limit: int | None = None, skip: dict[str, int] | None = None
               ) -> dict[str, int]:
    """Docs each task (or each task of a group, summed) evaluates: lmms-eval's own task objects, less the `skip`
    leading docs (discovery's), at most `limit`."""
    out = {}
    for task in tasks:
        total = 0
        for name, leaf in leaf_tasks(tm, task):
            left = max(0, len(leaf.eval_docs) - int((skip or {}).get(name, 0)))
            total += left if limit is None else min(limit, left)
        out[task] = total
    return out


def limited(n: int, limit: int | float | None) -> int:
    """How many docs of a task of `n` an evaluator pass with this `limit` reads (lmms-eval's rule: a limit below 1
    is a share of the docs)."""
    if limit is None or limit < 0:
        return n
    return int(math.ceil(n * limit)) if limit < 1.0 else int(limit)


def eval_docs(tm, tasks: list[str], limit: int | float | None = None, only: set[int] | None = None):
    """(task, doc id, doc) of every doc an evaluator pass with this `limit` reads (lmms-eval's rule: a limit below
    1 is a share of the docs), or of the doc ids `only`, task by task: what a check of the docs before any model
    loads reads."""
    for task in tasks:
        for name, leaf in leaf_tasks(tm, task):
            docs = leaf.eval_docs
            n = min(len(docs), limited(len(docs), limit))
            for doc_id in sorted(i for i in only if i < n) if only is not None else range(n):
                yield name, doc_id, docs[doc_id]


def _missing_tasks(missing: list[str]) -> VRHError:
    return VRHError(f"task(s) not found: {', '.join(missing)} (plugin tasks are named vrh_*; "
                    f"`lmms-eval --tasks list --include_path \"$(vrh-lmms tasks-path)\"` lists them)")


def check_tasks(tm, tasks: list[str]) -> None:
    known = set(tm.all_tasks)
    missing = [t for t in tasks if t not in known]
    if missing:
        raise _missing_tasks(missing)


def check_task_names(tasks: list[str], include_path: str | list[str] | None = None) -> None:
    """Refuse task names that no task YAML mentions at all, in well under a second and without importing
    lmms-eval: every task, group and tag is named literally in some YAML of our task folder, lmms-eval's or
    `include_path`. (A name that is mentioned is then checked for real by a TaskManager.)"""
    folders = [tasks_path()]
    spec = importlib.util.find_spec("lmms_eval")
    if spec is not None and spec.submodule_search_locations:
        folders.append(Path(list(spec.submodule_search_locations)[0]) / "tasks")
    if include_path:
        folders += [Path(p) for p in ([include_path] if isinstance(include_path, str) else include_path)]
    wanted = {t for t in tasks if t}
    for folder in folders:
        files = [folder] if folder.is_file() else sorted(folder.rglob("*.yaml")) + sorted(folder.rglob("*.yml"))
        for path in files:
            try:
                text = path.read_text(encoding="utf-8", errors="ignore")
            except OSError:
                continue
            wanted = {t for t in wanted if t not in text}
            if not wanted:
                return
    raise _missing_tasks([t for t in tasks if t in wanted])


def evaluate(lm, tasks: list[str], tm, limit: int | float | None = None, gen_kwargs: str | None = None,
             bootstrap_iters: int = 0, seed: int = 0,
             offsets: Mapping[str, int] | None = None) -> dict[str, Any] | None:
    """lmms-eval's simple_evaluate with samples logged; None on non-zero ranks. On several ranks the executor
    backend fits the launch and rank 0 aggregates in one-process doc order (vrh_lmms.harness.distributed).

    `offsets` skips each named task's first docs (lmms-eval's own `offset`, so doc ids stay the dataset's): tasks
    with different offsets run as separate evaluator passes whose results are merged task by task."""
    parts = [_evaluate_once(lm, names, tm, limit, gen_kwargs, bootstrap_iters, seed, offset)
             for offset, names in _offset_groups(tasks, offsets).items()]
    if any(p is None for p in parts):
        return None
    return merge_results(parts)


def generate(lm, tasks: list[str], tm, limit: int | float | None = None, gen_kwargs: str | None = None,
             seed: int = 0, offsets: Mapping[str, int] | None = None) -> None:
    """The evaluator passes of `evaluate`, each ended once its model calls are made: no doc is scored and nothing
    aggregated. The fast sweep engine's dry pass records a pack's calls this way; scoring its empty answers would
    cost a judge call per doc on a judge-scored task."""
    for offset, names in _offset_groups(tasks, offsets).items():
        with _ends_after_generation(lm):
            try:
                _evaluate_once(lm, names, tm, limit, gen_kwargs, 0, seed, offset)
            except _Generated:
                pass


class _Generated(Exception):
    """An evaluator pass made its model calls (`generate`)."""


@contextmanager
def _ends_after_generation(lm) -> Iterator[None]:
    """While active, `lm.clean()`, which lmms-eval's evaluator calls once every model call is made and before any
    doc is scored, ends the pass (after doing its own work)."""
    clean, own = lm.clean, vars(lm).get("clean")

    def clean_then_end() -> None:
        clean()
        raise _Generated

    lm.clean = clean_then_end
    try:
        yield
    finally:
        if own is None:
            vars(lm).pop("clean", None)
        else:
            lm.clean = own


def _offset_groups(tasks: list[str], offsets: Mapping[str, int] | None) -> dict[int, list[str]]:
    """The tasks of one evaluator pass per offset (tasks with different offsets run as separate passes)."""
    groups: dict[int, list[str]] = {}
    for task in tasks:
        groups.setdefault(int((offsets or {}).get(task, 0)), []).append(task)
    return groups


def _evaluate_once(lm, tasks: list[str], tm, limit, gen_kwargs, bootstrap_iters: int, seed: int,
                   offset: int) -> dict[str, Any] | None:
    # deferred: keeps `vrh-lmms eval --help` free of lmms_eval
    from lmms_eval import evaluator

    restore_truncated_images()
    with distributed.doc_order(), retry_unwrapped():
        return evaluator.simple_evaluate(
            model=lm, tasks=tasks, task_manager=tm, limit=limit, log_samples=True, gen_kwargs=gen_kwargs or None,
            bootstrap_iters=bootstrap_iters, random_seed=seed, numpy_random_seed=seed, torch_random_seed=seed,
            fewshot_random_seed=seed, batch_size=getattr(lm, "batch_size", 1), verbosity="WARNING",
            distributed_executor_backend=distributed.executor_backend(lm), offset=offset)


def merge_results(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One results dict from evaluator passes over disjoint task lists: per-task tables (results, samples,
    configs, ...) are united; run-level fields (config, date, ...) are the first pass's."""
    merged = dict(parts[0])
    for part in parts[1:]:
        for key, value in part.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            elif key not in merged:
                merged[key] = value
    return merged


def _default(o: Any):
    # deferred: keeps `vrh-lmms eval --help` free of lmms_eval
    from lmms_eval.utils import handle_non_serializable

    return handle_non_serializable(o)


def write_run(folder: str | Path, results: dict[str, Any], vrh: dict[str, Any] | None) -> Path:
    """Write `results.json` + `samples_<task>.jsonl` into `folder` atomically: a temp folder renamed at the end,
    so a folder that exists is complete. Refuses to replace an existing folder."""
    folder = Path(folder)
    if folder.exists():
        raise VRHError(f"{folder} exists already; refusing to overwrite it")
    tmp = atomic.staging_dir(folder)
    samples = results.get("samples", {}) or {}
    for task, rows in samples.items():
        with open(tmp / f"samples_{task}.jsonl", "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, default=_default, ensure_ascii=False) + "\n")
    body = {k: v for k, v in results.items() if k != "samples"}
    if vrh is not None:
        body["vrh"] = vrh
    (tmp / "results.json").write_text(json.dumps(body, indent=2, default=_default, ensure_ascii=False))
    return atomic.publish_dir(tmp, folder)


# ------------------------------------------------------------ `vrh-lmms eval`: lmms-eval's own command line
def _add_device_map(model: str, model_args: str) -> str:
    """Base lmms-eval backends default to device_map=auto (CUDA); on CPU they need device_map=cpu."""
    if "device_map=" in (model_args or "") or default_device_map() == "auto":
        return model_args
    try:
        # deferred: keeps `vrh-lmms eval --help` free of lmms_eval
        from lmms_eval.models import get_model

        cls = get_model(model)
    except Exception:
        return model_args
    if "device_map" not in inspect.signature(cls.__init__).parameters:
        return model_args
    extra = f"device_map={default_device_map()}"
    return f"{model_args},{extra}" if model_args else extra


def passthrough(lmms_args: list[str]) -> int:
    rest = [a for a in lmms_args if a != "--"]
    sys.argv = ["lmms-eval", *rest]
    os.environ["VRH_LMMS_CLI"] = "1"
    # deferred: keeps `vrh-lmms eval --help` free of lmms_eval
    from lmms_eval.__main__ import cli_evaluate, parse_eval_args

    _, parsed = parse_eval_args()
    if parsed.model:
        # deferred: keeps `vrh-lmms eval --help` free of lmms_eval, filelock
        from lmms_eval.models import list_available_models

        from vrh_lmms.harness.preload import vrh_model_names

        if parsed.model not in list_available_models(include_aliases=True):
            raise VRHError(f"--model {parsed.model!r} is not a registered model; the vrh-lmms models are: "
                           f"{', '.join(vrh_model_names())} (lmms-eval's own: `lmms-eval --help`)")
    includes = [str(tasks_path())]
    if parsed.include_path:
        includes.append(parsed.include_path)
    parsed.include_path = includes
    if parsed.device is None and not default_device().startswith("cuda"):
        parsed.device = default_device()
    if parsed.model and parsed.tasks not in (None, "list", "list_groups", "list_tags", "list_subtasks"):
        parsed.model_args = _add_device_map(parsed.model, parsed.model_args)
    before = set(Path(parsed.output_path).rglob("*_results.json")) if parsed.output_path else set()
    if distributed.world_size() > 1:  # lmms-eval starts the process group; the CLI closes it
        distributed.import_world_readers()
    cli_evaluate(parsed)
    if parsed.output_path and parsed.tasks not in (None, "list", "list_groups", "list_tags", "list_subtasks"):
        after = set(Path(parsed.output_path).rglob("*_results.json"))
        if not after - before:
            print("vrh-lmms: error: lmms-eval wrote no results file (see the log above)", file=sys.stderr)
            return 1
    return 0
