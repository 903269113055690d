"""Thin adapter over lmms-eval: build a `vrh_*` model, a TaskManager that sees our tasks, run the evaluator,
and write results in lmms-eval's own file formats. The rest of the core stays free of lmms-eval imports."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from vrh_lmms.errors import VRHError
from vrh_lmms.paths import tasks_path


def build_model(model: str, model_args: str, batch_size: int = 1, extra_args: dict[str, Any] | None = None):
    """Instantiate an lmms-eval model by registered name (our entry points included)."""
    from lmms_eval.models import get_model

    try:
        cls = get_model(model)
    except Exception as exc:  # lmms-eval raises ValueError listing every model
        raise VRHError(f"model {model!r} is not registered with lmms-eval ({str(exc).splitlines()[0][:200]})") from None
    args = dict(extra_args or {})
    args["batch_size"] = batch_size
    lm = cls.create_from_arg_string(model_args or "", args)
    if not hasattr(lm, "vrh_decoder"):
        raise VRHError(f"model {model!r} is not a vrh_* model (no head ablation support); use e.g. vrh_qwen25")
    lm.vrh_keep_loaded = True  # one load serves every configuration
    return lm


def task_manager(model_name: str | None = None, include_path: str | list[str] | None = None,
                 tasks: list[str] | None = None):
    """A TaskManager that sees our tasks (and `include_path`). When every name in `tasks` is found there, lmms-eval's
    own ~6,500 task YAMLs are not indexed at all (that indexing alone takes ~10 s per manager on 2 cores)."""
    from lmms_eval.tasks import TaskManager

    paths = [str(tasks_path())]
    if include_path:
        paths += [include_path] if isinstance(include_path, str) else list(include_path)
    if tasks:
        ours = TaskManager("WARNING", include_path=paths, include_defaults=False, model_name=model_name)
        if set(tasks) <= set(ours.all_tasks):
            return ours
    return TaskManager("WARNING", include_path=paths, model_name=model_name)


def check_tasks(tm, tasks: list[str]) -> None:
    known = set(tm.all_tasks)
    missing = [t for t in tasks if t not in known]
    if missing:
        raise VRHError(f"task(s) not found: {', '.join(missing)} (plugin tasks are named vrh_*; "
                       f"`lmms-eval --tasks list --include_path \"$(vrh-lmms tasks-path)\"` lists them)")


def evaluate(lm, tasks: list[str], tm, limit: int | float | None = None, gen_kwargs: str | None = None,
             bootstrap_iters: int = 0, seed: int = 0) -> dict[str, Any] | None:
    """lmms-eval's simple_evaluate with samples logged; None on non-zero ranks."""
    from lmms_eval import evaluator

    return evaluator.simple_evaluate(
        model=lm, tasks=tasks, task_manager=tm, limit=limit, log_samples=True, gen_kwargs=gen_kwargs or None,
        bootstrap_iters=bootstrap_iters, random_seed=seed, numpy_random_seed=seed, torch_random_seed=seed,
        fewshot_random_seed=seed, batch_size=getattr(lm, "batch_size", 1), verbosity="WARNING")


def _default(o: Any):
    from lmms_eval.utils import handle_non_serializable

    return handle_non_serializable(o)


def write_run(folder: str | Path, results: dict[str, Any], vrh: dict[str, Any] | None) -> Path:
    """Write `results.json` + `samples_<task>.jsonl` into `folder` atomically: a temp folder renamed at the end,
    so a folder that exists is complete. Refuses to replace an existing folder."""
    folder = Path(folder)
    if folder.exists():
        raise VRHError(f"{folder} exists already; refusing to overwrite it")
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    samples = results.get("samples", {}) or {}
    for task, rows in samples.items():
        with open(tmp / f"samples_{task}.jsonl", "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, default=_default, ensure_ascii=False) + "\n")
    body = {k: v for k, v in results.items() if k != "samples"}
    if vrh is not None:
        body["vrh"] = vrh
    (tmp / "results.json").write_text(json.dumps(body, indent=2, default=_default, ensure_ascii=False))
    os.replace(tmp, folder)
    return folder
