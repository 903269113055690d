"""What vrh-lmms wrote, recognised by manifest or layout, so that `--force` never deletes anything else.

An output folder is described by a *layout*: glob patterns for the names vrh-lmms writes there, each with a
check that the entry really is ours (a JSON manifest with our schema, a folder of our run files, ...). Checkpoint
folders, whose file names depend on the model, carry a *listing* (`.vrh-lmms-files.json`) of the files written.

`prepare_output` is the one rule every command follows before it writes:
- absent or empty: go ahead;
- anything in it that is not ours: refuse, naming it (and not suggesting --force, which would not help);
- our earlier output: refuse unless `force`; with `force`, remove exactly our entries.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import numpy as np
from safetensors import safe_open

from vrh_lmms.base import atomic, runfile
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.folder_lock import SUFFIX as LOCK_SUFFIX

LISTING = ".vrh-lmms-files.json"
LOG_HEADER = "# vrh-lmms log"  # first line of a command's log file (vrh_lmms.base.console)

Check = Callable[[Path], bool]
Layout = Mapping[str, Check | None]  # glob pattern on an entry's name -> check (None: the name is enough)


# ----------------------------------------------------------------------------------------------------- checks
def json_with(*keys: str, schema_prefix: str | None = None) -> Check:
    """A JSON object file holding `keys` (and a `schema` starting with `schema_prefix`)."""

    def check(path: Path) -> bool:
        if not path.is_file():
            return False
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        if not isinstance(data, dict) or any(k not in data for k in keys):
            return False
        return schema_prefix is None or str(data.get("schema", "")).startswith(schema_prefix)

    return check


def json_problem(path: Path) -> str | None:
    """Why `path` cannot be read as a JSON object (not UTF-8, not JSON, not an object); None where it can."""
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        return "not UTF-8 text"
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    except ValueError as exc:
        return f"not JSON: {exc}"
    return None if isinstance(data, dict) else "not a JSON object"


def is_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def log_file(path: Path) -> bool:
    """A command's log of its libraries' output (vrh_lmms.base.console), recognised by its first line."""
    if not is_file(path):
        return False
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.readline().rstrip("\n") == LOG_HEADER


def folder_of(layout: Layout) -> Check:
    """A folder (not a link) whose every entry is ours by `layout`."""

    def check(path: Path) -> bool:
        return path.is_dir() and not path.is_symlink() and not foreign_entries(path, layout)

    return check


def files_matching(*patterns: str) -> Check:
    """A folder holding only plain files whose names match `patterns`."""
    return folder_of({p: is_file for p in patterns})


def npz_with(*keys: str) -> Check:
    def check(path: Path) -> bool:
        try:
            with np.load(path) as data:
                return all(k in data.files for k in keys)
        except (OSError, ValueError):
            return False

    return check


def safetensors_with(*keys: str) -> Check:
    def check(path: Path) -> bool:
        try:
            with safe_open(str(path), framework="np") as f:
                return all(k in f.keys() for k in keys)
        except Exception:  # safetensors raises its own error types for foreign files
            return False

    return check


# Results folders written by `vrh_lmms.harness.lmms.write_run` (sweep configurations, discovery evaluations).
RUN_FOLDER = files_matching("results.json", "samples_*.jsonl")


# ---------------------------------------------------------------------------------------------------- layouts
def _claims(layout: Layout, path: Path) -> bool:
    for pattern, check in layout.items():
        if fnmatch.fnmatchcase(path.name, pattern):
            return check is None or check(path)
    return False


def _entries(folder: Path) -> list[Path]:
    """The entries of `folder` but the locks of outputs inside it (vrh_lmms.base.folder_lock): neither foreign nor ours
    to remove, since another run may hold them."""
    return [p for p in sorted(folder.iterdir())
            if not (p.name.endswith(LOCK_SUFFIX) or p.name.endswith(LOCK_SUFFIX + ".json"))]


def foreign_entries(folder: str | Path, layout: Layout) -> list[Path]:
    """Entries of `folder` that `layout` does not claim (an entry is judged by the first pattern its name
    matches)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return [p for p in _entries(folder) if not _claims(layout, p)]


def owned_entries(folder: str | Path, layout: Layout) -> list[Path]:
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return [p for p in _entries(folder) if _claims(layout, p)]


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _names(paths: Iterable[Path], limit: int = 4) -> str:
    paths = list(paths)
    shown = ", ".join(p.name + ("/" if p.is_dir() else "") for p in paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def refuse_foreign(folder: Path, foreign: list[Path], option: str = "--output") -> None:
    if foreign:
        raise VRHError(f"{folder} holds {len(foreign)} item(s) that vrh-lmms did not write ({_names(foreign)}); "
                       f"nothing was changed: choose another {option}, or move them away yourself")


def check_checkpoint_output(output: Path, source: str, layout: Layout, *, force: bool, what: str) -> list[Path]:
    """`check_output` for a command that writes a checkpoint made from `source`: the output may not be the source
    folder or inside it (writing there would replace the weights being read)."""
    src = Path(source)
    if src.exists():
        s, o = src.resolve(), Path(output).resolve()
        if o == s or o in s.parents:
            raise VRHError(f"--output {output} would replace the source checkpoint {source}; choose another folder")
    return check_output(output, layout, force=force, what=what)


def publish_checkpoint(staging: Path, output: Path, layout: Layout, *, force: bool, what: str) -> Path:
    """Move a finished checkpoint folder from `staging` into `output`, listing its files first (so a later run
    knows them as ours) and replacing only what an earlier run of ours wrote there."""
    write_listing(staging)
    for path in check_output(output, layout, force=force, what=what):
        remove(path)
    if output.exists():
        output.rmdir()
    return atomic.publish_dir(staging, output)


def check_output(folder: str | Path, layout: Layout, *, force: bool, what: str,
                 option: str = "--output") -> list[Path]:
    """The refusals of `prepare_output` without its removals: returns our entries that `force` will replace."""
    folder = Path(folder)
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise VRHError(f"{option} {folder} exists and is not a folder; choose another {option}")
    if not folder.exists() or not _entries(folder):
        return []
    refuse_foreign(folder, foreign_entries(folder, layout), option)
    if not force:
        raise VRHError(f"{folder} holds {what}; choose another {option} or pass --force to replace it")
    return owned_entries(folder, layout)


def prepare_output(folder: str | Path, layout: Layout, *, force: bool, what: str, option: str = "--output") -> None:
    """Make `folder` ready to be written (see the module doc). `what` names our earlier output in messages."""
    for path in check_output(folder, layout, force=force, what=what, option=option):
        remove(path)


def prepare_file(path: str | Path, check: Check, *, force: bool, what: str, option: str = "--output") -> None:
    """The same rule for one output file: refuse a file we did not write; ours is replaced only with `force`."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return
    if path.is_dir() or path.is_symlink() or not check(path):
        raise VRHError(f"{path} exists and is not {what} written by vrh-lmms; nothing was changed: choose another "
                       f"{option}, or move it away yourself")
    if not force:
        raise VRHError(f"{path} holds {what}; choose another {option} or pass --force to replace it")


# ---------------------------------------------------------------------------------------------------- listings
def write_listing(folder: str | Path) -> Path:
    """Record every file under `folder` as written by vrh-lmms (call when the folder is complete)."""
    folder = Path(folder)
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and p.name != LISTING)
    return atomic.write_text(folder / LISTING, json.dumps({"schema": "vrh-files/1", "files": files}, indent=1))


def listed_files(folder: str | Path) -> set[str] | None:
    """The files a listing names, or None when the folder has no readable listing."""
    path = Path(folder) / LISTING
    if not json_with("files", schema_prefix="vrh-files/")(path):
        return None
    return {str(f) for f in json.loads(path.read_text())["files"]}


def listing_layout(folder: str | Path, extra: Iterable[str] = ()) -> Layout:
    """Layout claiming the listing, the files it names (and folders holding only those), plus `extra` names and the
    run file the command line writes after the checkpoint (vrh_lmms.base.runfile)."""
    folder = Path(folder)
    listed = (listed_files(folder) or set()) | set(extra)

    def ours(path: Path) -> bool:
        if path.is_symlink():
            return False
        if path.is_file():
            return str(path.relative_to(folder)) in listed
        return path.is_dir() and all(ours(p) for p in path.iterdir())

    return {LISTING: None, runfile.RUN_FILE: runfile.is_ours, "*": ours}
