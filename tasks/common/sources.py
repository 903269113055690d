"""Where a task's rows come from: the hub, local files in the hub schema, or a benchmark's own local layout.

Every vrh task YAML loads ``common/placeholder.jsonl`` (one row, ``{"vrh_source": "auto"}``) through lmms-eval,
so nothing touches the network before our ``process_docs`` decides where the data really is:

1. A *source spec* row. The shipped placeholder says ``auto``; a derived YAML may point ``dataset_kwargs.data_files``
   at its own one-row JSONL such as ``{"vrh_source": "refer", "root": "/data/refer"}`` (the task-level way to
   choose a source). Keys: ``vrh_source`` (hub | files | refer | raw | synth | auto) plus that kind's options.
2. For ``auto``, environment variables, per benchmark key (``REFCOCO``, ``TOLOKA``, ...):
   ``VRH_<KEY>_SOURCE`` (force a kind), ``VRH_<KEY>_DATA`` (files), ``VRH_<KEY>_ROOT`` (the benchmark's local
   layout), ``VRH_<KEY>_IMAGES`` (image folder for local layouts), ``VRH_<KEY>_HUB`` (hub id override).
3. Otherwise the benchmark's default (usually the hub dataset lmms-eval uses).

A derived YAML may also set ``dataset_path``/``dataset_kwargs`` to real rows in the benchmark's hub schema (a
hub id, or ``parquet`` + ``data_files``): ``process_docs`` then just normalises what lmms-eval loaded.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vrh_lmms.base.data_env import SOURCE_PARTS, source_variable
from vrh_lmms.base.errors import VRHError

SPEC_COLUMN = "vrh_source"
KINDS = ("hub", "files", "refer", "raw", "synth")
DATA_SUFFIXES = (".parquet", ".jsonl", ".json", ".csv", ".arrow")


class SourceError(VRHError, ValueError):
    """A data source is misconfigured or empty; the message names the setting (env var, spec key, file) at fault.
    A VRHError, so the command line shows it as one line (a ValueError still, for callers that catch those)."""


@dataclass(frozen=True)
class Source:
    kind: str
    options: Mapping[str, Any] = field(default_factory=dict)
    origin: str = "default"  # what chose it, for error messages

    def get(self, key: str, default: Any = None) -> Any:
        value = self.options.get(key)
        return default if value in (None, "") else value

    def require(self, key: str, hint: str) -> Any:
        value = self.get(key)
        if value is None:
            raise SourceError(f"{self.kind} source from {self.origin} needs {key!r} ({hint})")
        return value


def env_name(key: str, what: str) -> str:
    """`VRH_<key>_<what>`: the per-benchmark rule (vrh_lmms.base.data_env, which puts every such variable into a
    run's identity)."""
    return source_variable(key, what)


def spec_row(dataset) -> dict[str, Any] | None:
    """The source spec of a placeholder dataset, or None when lmms-eval loaded real rows."""
    if dataset is None or SPEC_COLUMN not in dataset.column_names:
        return None
    if len(dataset) != 1:
        raise SourceError(f"a source spec file must hold exactly one row, got {len(dataset)}")
    return {k: v for k, v in dataset[0].items() if v is not None}


def resolve(key: str, spec: Mapping[str, Any] | None, default: Source, local_kind: str | None,
            allowed: tuple[str, ...], root_fallback: str | None = None) -> Source:
    """Pick the source: an explicit spec row wins, then ``VRH_<key>_*`` variables, then ``default``.

    ``root_fallback`` names another variable read when ``VRH_<key>_ROOT`` is unset (RefCOCO+/g share RefCOCO's).
    """
    spec = dict(spec or {})
    kind = str(spec.pop(SPEC_COLUMN, "auto") or "auto")
    if kind != "auto":
        if kind not in allowed:
            raise SourceError(f"source spec: vrh_source={kind!r} is not available here; use one of "
                              f"{', '.join(('auto', *allowed))}")
        if kind in ("files", "hub") and default.get("name") and "name" not in spec:
            spec["name"] = default.get("name")  # the task's config travels with any files or hub source
        return Source(kind, spec, "the task's source spec")
    env = {what: os.environ.get(env_name(key, what), "").strip() for what in SOURCE_PARTS}
    if not env["ROOT"] and root_fallback and os.environ.get(root_fallback, "").strip():
        env["ROOT"] = os.environ[root_fallback].strip()
    if env["SOURCE"]:
        chosen, origin = env["SOURCE"], env_name(key, "SOURCE")
        if chosen not in allowed:
            raise SourceError(f"{origin}={chosen!r} is not available for this benchmark; use one of "
                              f"{', '.join(allowed)}")
    elif env["DATA"]:
        chosen, origin = "files", env_name(key, "DATA")
    elif env["ROOT"] and local_kind:
        chosen, origin = local_kind, env_name(key, "ROOT")
    else:
        chosen, origin = default.kind, "the default"
    options = dict(default.options) if chosen == default.kind else {}
    if chosen == "hub" and env["HUB"]:  # another hub id, or a downloaded snapshot folder
        options["path"], origin = env["HUB"], env_name(key, "HUB")
    if chosen == "files":
        if default.get("name") and "name" not in options:  # the task's config (Spatial457 level, CV-Bench 2D/3D)
            options["name"] = default.get("name")
        if not env["DATA"] and not options.get("path"):
            raise SourceError(f"{origin}=files needs {env_name(key, 'DATA')}=PATH (a folder of "
                              f"<split>.parquet/.jsonl files, or one file)")
        if env["DATA"]:
            options["path"] = env["DATA"]
    if chosen == local_kind:
        if env["ROOT"]:
            options["root"] = env["ROOT"]
        if not options.get("root") and chosen != default.kind:
            raise SourceError(f"{origin}={chosen} needs {env_name(key, 'ROOT')}=PATH")
    if env["IMAGES"]:
        options["images"] = env["IMAGES"]
    return Source(chosen, options, origin)


# --------------------------------------------------------------------------------------------------- loading
DEFAULT_CONFIGS = (None, "", "default")


def _named(config: str | None) -> bool:
    return config not in DEFAULT_CONFIGS


def is_snapshot(folder: Path) -> bool:
    """A downloaded hub snapshot whose README.md declares ``configs`` (how the hub maps files to configs/splits)."""
    readme = folder / "README.md"
    if not readme.is_file():
        return False
    text = readme.read_text(encoding="utf-8", errors="replace")
    if not text.startswith("---"):
        return False
    try:
        header = yaml.safe_load(text.split("---", 2)[1]) or {}
    except yaml.YAMLError:
        return False
    return isinstance(header, dict) and bool(header.get("configs"))


def _split_in(folder: Path, stems: tuple[str, ...]) -> list[Path]:
    """``<stem>.<ext>``, else the shards ``<stem>-*.<ext>``, in ``folder`` or ``folder/data``."""
    for base in (folder, folder / "data"):
        for stem in stems:
            for suffix in DATA_SUFFIXES:
                if (base / f"{stem}{suffix}").is_file():
                    return [base / f"{stem}{suffix}"]
            for suffix in DATA_SUFFIXES:
                shards = sorted(p for p in base.glob(f"{stem}-*{suffix}") if p.is_file())
                if shards:
                    return shards
    return []


def split_files(path: str | Path, split: str, config: str | None, origin: str) -> list[Path]:
    """The local files of one split (and config) under ``path``: the rule of docs/tasks.md "Local files".

    A file serves the benchmark's default config only. In a folder, a named config (Spatial457 ``L1_single``,
    CV-Bench ``2D``) reads ``<config>/`` (or ``data/<config>/``), else ``<split>_<config>.<ext>`` (CV-Bench's
    ``test_2d.parquet``), never the default config's files; the default config reads ``<split>.<ext>``. Each name
    may be one file or hub-style shards ``<split>-00000-of-0000N.<ext>``, directly or under ``data/``.
    """
    p = Path(path).expanduser()
    if p.is_file():
        if _named(config):
            raise SourceError(f"{origin}={p} is one file, but this task reads config {config!r}: point it at a "
                              f"folder holding {config}/{split}.parquet (or a hub snapshot) instead")
        return [p]
    if not p.is_dir():
        raise SourceError(f"{origin}: {p} does not exist")
    if _named(config):
        for sub in (p / str(config), p / "data" / str(config)):
            if sub.is_dir() and (found := _split_in(sub, (split,))):
                return found
        names = tuple(dict.fromkeys((f"{split}_{config}", f"{split}_{str(config).lower()}")))
        if found := _split_in(p, names):
            return found
        raise SourceError(f"{origin}: no files of config {config!r}, split {split!r} in {p} (looked for "
                          f"{config}/{split}[-*].<ext>, {names[-1]}[-*].<ext>, also under data/; "
                          f"<ext> one of {', '.join(DATA_SUFFIXES)})")
    found = _split_in(p, (split,)) or (_split_in(p / "default", (split,)) if (p / "default").is_dir() else [])
    if found:
        return found
    raise SourceError(f"{origin}: no {split}[-*].<ext> in {p} or {p / 'data'} (<ext> one of "
                      f"{', '.join(DATA_SUFFIXES)})")


_BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv", ".arrow": "arrow"}


def load_files(source: Source, split: str):
    """Rows of ``split`` (and the source's config ``name``) from local files in the benchmark's hub schema."""
    # deferred: keeps `vrh-lmms report` free of datasets
    import datasets

    path = Path(source.require("path", "a file or folder of <split>.parquet files")).expanduser()
    config = source.get("name")
    if path.is_dir() and is_snapshot(path):
        try:
            return datasets.load_dataset(str(path), name=None if not _named(config) else config, split=split)
        except Exception as exc:  # datasets raises many types for bad snapshots
            raise SourceError(f"{source.origin}: could not read config {config or 'default'!r}, split {split!r} "
                              f"of the hub snapshot {path} ({type(exc).__name__}: {exc})") from exc
    files = split_files(path, split, config, source.origin)
    builder = _BUILDERS[files[0].suffix]
    return datasets.load_dataset(builder, data_files={split: [str(f) for f in files]}, split=split)


def load_hub(source: Source, split: str):
    """Rows of ``split`` from a hub dataset (the local HF cache answers when HF_DATASETS_OFFLINE=1)."""
    # deferred: keeps `vrh-lmms report` free of datasets
    import datasets

    path = source.require("path", "a hub dataset id")
    kwargs = {}
    if source.get("name"):
        kwargs["name"] = source.get("name")
    try:
        return datasets.load_dataset(path, split=split, **kwargs)
    except Exception as exc:
        raise SourceError(f"could not load hub dataset {path!r} split {split!r} (chosen by {source.origin}): {exc}. "
                          f"Download it once online, or point the task at local data (docs/tasks.md)") from exc


def load_rows(source: Source, split: str):
    if source.kind == "hub":
        return load_hub(source, split)
    if source.kind == "files":
        return load_files(source, split)
    raise SourceError(f"internal: {source.kind} sources are read by the benchmark's own loader")


def resolve_image_path(name: str, folders: list[Path]) -> Path | None:
    """``name`` (absolute, or relative to one of ``folders``), if it exists."""
    p = Path(name)
    if p.is_absolute():
        return p if p.exists() else None
    for folder in folders:
        cand = folder / name
        if cand.exists():
            return cand
    return None


def existing_dir(path: str | Path | None, origin: str) -> Path:
    if path is None:
        raise SourceError(f"{origin}: no folder given")
    p = Path(path).expanduser()
    if not p.is_dir():
        raise SourceError(f"{origin}: {p} is not a folder")
    return p


def env_json_config(env: str, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """A synthetic task's settings: `defaults` overridden by the JSON text or JSON file named in the environment
    variable `env` (unset or empty: the defaults). An unreadable value or an unknown key is one SourceError line."""
    raw = os.environ.get(env, "").strip()
    data: dict[str, Any] = {}
    if raw:
        try:
            data = json.loads(Path(raw).read_text() if not raw.startswith("{") else raw)
        except (OSError, ValueError) as exc:
            raise SourceError(f"{env}: not JSON text or a readable JSON file ({exc})") from None
    if not isinstance(data, dict):
        raise SourceError(f"{env}: expected a JSON object of settings, got {type(data).__name__}")
    unknown = set(data) - set(defaults)
    if unknown:
        raise SourceError(f"{env}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(defaults)}")
    return {**defaults, **data}
