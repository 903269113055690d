"""Metadata of one run from its results JSON: which model, which configuration, whose heads.

A results JSON without a `vrh` block (plain lmms-eval) is a baseline run of the model named by `model_name` or the
`pretrained=` model argument. Configuration labels get an `@<source>` suffix when the heads file came from another
model (cross-model transfer), so a model's own `top20` and a transferred `top20` stay apart; `task_sources` gives
heads discovered on another task the suffix `@task:<discovery task>` (cross-ablation), where the same model x task
also holds runs of heads discovered on that task itself.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import kinds
from vrh_lmms.base.paths import shown_model

CONFIG_KINDS = kinds.NAMES  # the configuration kinds a run may record (vrh_lmms.base.heads.kinds)
_ID_PATTERN = kinds.id_pattern()


@dataclass(frozen=True)
class RunMeta:
    """What a results JSON says about its run; `heads_source` is None for the model's own heads."""

    model: str
    config_id: str
    kind: str
    k: int | None
    seed: int | None
    mode: str | None
    heads_source: str | None
    heads_file: dict | None
    results_path: Path
    heads: tuple[str, ...] | None = None  # the resolved heads the run ablated (vrh.ablation.heads)
    pool: str | None = None  # controls: what the draw came from, "live" or "all" (vrh.ablation.pool)
    dead_in_set: tuple[str, ...] | None = None  # the ablated heads that write nothing (vrh.ablation.dead_heads)
    model_dead: tuple[str, ...] | None = None  # the model's heads that write nothing (vrh.dead_heads)
    excluded_docs: dict | None = None  # task -> first doc evaluated, where discovery's docs were left out
    cell: str | None = None  # scorer_topk: the scoring cell whose top-k was masked (vrh.config.cell)
    # controls of a sweep with --control-docs: the seeded image subset they ran on (vrh.doc_subset: n, seed, and per
    # task its doc ids and counts)
    doc_subset: dict | None = None

    @property
    def heads_tasks(self) -> tuple[str, ...]:
        """The task(s) the heads file's discovery ran on (recorded since the cross-ablation runs; () for older runs)."""
        task = (self.heads_file or {}).get("task") if self.kind != "baseline" else None
        return tuple(t for t in task.split(",") if t) if isinstance(task, str) else ()

    @property
    def label(self) -> str:
        if self.heads_source is None:
            return self.config_id
        return f"{self.config_id}@{short_model(self.heads_source)}"


def normalize_model(name: str) -> str:
    """The model as the report names it: a hub id as it is, a local checkpoint relative to the working folder or
    under `~` (vrh_lmms.base.paths.shown_model), never by its absolute path."""
    return shown_model(name.strip().rstrip("/")).rstrip("/")


def short_model(name: str) -> str:
    """Last path component of a hub id or local path: `Qwen/Qwen2.5-VL-7B-Instruct` -> `Qwen2.5-VL-7B-Instruct`."""
    return normalize_model(name).split("/")[-1] or name


def same_model(a: str, b: str) -> bool:
    """Hub id vs local path of the same checkpoint compare equal by their last path component (case-insensitive)."""
    return normalize_model(a) == normalize_model(b) or short_model(a).lower() == short_model(b).lower()


def load_json(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as exc:
        raise VRHError(f"{path}: not valid JSON ({exc})") from exc
    except OSError as exc:
        raise VRHError(f"{path}: cannot read ({exc.strerror})") from exc
    if not isinstance(data, dict):
        raise VRHError(f"{path}: expected a JSON object at the top level")
    return data


def _model_from_lmms(data: dict) -> str | None:
    """`model_name` (written by lmms-eval's tracker), else `pretrained=` in `config.model_args`."""
    name = data.get("model_name")
    if isinstance(name, str) and name:
        return normalize_model(name)
    args = (data.get("config") or {}).get("model_args") if isinstance(data.get("config"), dict) else None
    if isinstance(args, str):
        match = re.search(r"(?:^|,)\s*pretrained=([^,]+)", args)
        if match:
            return normalize_model(match.group(1))
    return None


def _int_or_none(value: Any, path: Path, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise VRHError(f"{path}: field {field} must be an integer or null, got {value!r}")
    return value


def _heads(value: Any, path: Path, name: str = "vrh.ablation.heads") -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(h, str) for h in value):
        raise VRHError(f"{path}: field {name} must be a list of head names like \"L12H3\"")
    return tuple(value)


def _from_vrh(block: dict, path: Path, fallback_model: str | None) -> RunMeta:
    if not isinstance(block, dict):
        raise VRHError(f"{path}: field vrh must be an object")
    schema = block.get("schema")
    if schema != 1:
        raise VRHError(f"{path}: field vrh.schema is {schema!r}; this report reads schema 1")
    pretrained = block.get("pretrained")
    if not isinstance(pretrained, str) or not pretrained:
        pretrained = fallback_model
    if not pretrained:
        raise VRHError(f"{path}: field vrh.pretrained is missing (and no model_name or pretrained= model argument)")
    config = block.get("config")
    if not isinstance(config, dict):
        raise VRHError(f"{path}: field vrh.config is missing")
    config_id, kind = config.get("id"), config.get("kind")
    if not isinstance(config_id, str) or not config_id:
        raise VRHError(f"{path}: field vrh.config.id is missing")
    if kind not in CONFIG_KINDS:
        raise VRHError(f"{path}: field vrh.config.kind is {kind!r}; expected one of {', '.join(CONFIG_KINDS)}")
    ablation = block.get("ablation") or {}
    if not isinstance(ablation, dict):
        raise VRHError(f"{path}: field vrh.ablation must be an object")
    mode = ablation.get("mode")
    if mode is None:
        parsed = _ID_PATTERN.match(config_id)
        mode = (parsed and parsed["mode"]) or ("none" if kind == "baseline" else "zero")
    heads_file = ablation.get("heads_file")
    source = None
    if kind != "baseline" and isinstance(heads_file, dict):
        file_model = heads_file.get("model")
        if isinstance(file_model, str) and file_model and not same_model(file_model, pretrained):
            source = normalize_model(file_model)
    return RunMeta(
        model=normalize_model(pretrained),
        config_id=config_id,
        kind=kind,
        k=_int_or_none(config.get("k"), path, "vrh.config.k"),
        seed=_int_or_none(config.get("seed"), path, "vrh.config.seed"),
        mode=None if kind == "baseline" else str(mode),
        heads_source=source,
        heads_file=heads_file if isinstance(heads_file, dict) else None,
        results_path=path,
        heads=_heads(ablation.get("heads"), path),
        pool=ablation.get("pool") if isinstance(ablation.get("pool"), str) else None,
        dead_in_set=_heads(ablation.get("dead_heads"), path, "vrh.ablation.dead_heads"),
        model_dead=_heads(block.get("dead_heads"), path, "vrh.dead_heads"),
        excluded_docs=_excluded(block.get("excluded_docs"), path),
        cell=config.get("cell") if isinstance(config.get("cell"), str) else None,
        doc_subset=_doc_subset(block.get("doc_subset"), path),
    )


def _doc_subset(block, path: Path) -> dict | None:
    """`vrh.doc_subset` (vrh_lmms.runs.sweep.control_docs): checked for the doc ids of each task."""
    if block is None:
        return None
    tasks = block.get("tasks") if isinstance(block, dict) else None
    if not isinstance(tasks, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("doc_ids"), list)
            and all(isinstance(i, int) and not isinstance(i, bool) for i in v["doc_ids"]) for v in tasks.values()):
        raise VRHError(f"{path}: field vrh.doc_subset.tasks must map tasks to {{\"doc_ids\": [int, ...]}}")
    return block


def _excluded(block, path: Path) -> dict | None:
    """`vrh.excluded_docs` (vrh_lmms.runs.sweep.exclusion) as task -> first doc evaluated."""
    if block is None:
        return None
    tasks = block.get("tasks") if isinstance(block, dict) else None
    if not isinstance(tasks, dict) or not all(isinstance(v, dict) and isinstance(v.get("first_doc"), int)
                                               for v in tasks.values()):
        raise VRHError(f"{path}: field vrh.excluded_docs.tasks must map tasks to {{\"first_doc\": int}}")
    return {t: v["first_doc"] for t, v in tasks.items()}


def read_run_meta(path: Path) -> RunMeta:
    """Metadata of the run whose results JSON is `path`."""
    data = load_json(path)
    if "vrh" in data:
        return _from_vrh(data["vrh"], path, _model_from_lmms(data))
    return RunMeta(_model_from_lmms(data) or path.parent.name, "baseline", "baseline",
                   None, None, None, None, None, path)


TASK_SOURCE = "task:"


def task_sources(items: list[tuple[RunMeta, str]]) -> list[RunMeta]:
    """Each (run, task) with heads found on another task marked as transferred from it (`heads_source` =
    `task:<discovery task>`), in every model x task that also holds runs of heads discovered on that task: there the
    two top-k runs would otherwise carry one label. Where no run of the task's own heads exists (the paper's
    grounding heads ablated on VQA), labels stay as they are. Runs of another model's heads keep that model."""
    own = {(m.model, task) for m, task in items if task in m.heads_tasks and m.heads_source is None}
    out = []
    for meta, task in items:
        if (meta.heads_source is None and meta.heads_tasks and task not in meta.heads_tasks
                and (meta.model, task) in own):
            meta = replace(meta, heads_source=TASK_SOURCE + "+".join(meta.heads_tasks))
        out.append(meta)
    return out
