"""Atomic writes whose results follow the umask, like any file the user writes with `open`.

`tempfile.mkstemp` / `mkdtemp` create 0600 files and 0700 folders whatever the umask, and safetensors writes its
files 0600 too; renamed into place, those modes would make heads files, reports, sweeps and checkpoints private,
although multi-GPU runs need them on a shared filesystem. Every temporary-then-rename write of vrh-lmms goes
through this module, which gives the result the mode a plain `open` / `mkdir` would have.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_UMASK_LINE = re.compile(r"^Umask:\s*([0-7]+)\s*$", re.MULTILINE)


def current_umask() -> int:
    """The process umask, read without changing it where the OS allows (Linux), else set and restored."""
    try:
        match = _UMASK_LINE.search(Path("/proc/self/status").read_text())
        if match:
            return int(match.group(1), 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def follow_umask(path: str | Path) -> None:
    """Give one file (0666) or folder (0777) the mode the umask allows; symlinks are left alone."""
    p = Path(path)
    if p.is_symlink():
        return
    base = 0o777 if p.is_dir() else 0o666
    os.chmod(p, base & ~current_umask())


def follow_umask_tree(root: str | Path) -> None:
    """`follow_umask` for a folder we have just written and everything inside it."""
    root = Path(root)
    follow_umask(root)
    if root.is_dir() and not root.is_symlink():
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                follow_umask(Path(dirpath) / name)


@contextmanager
def atomic_file(target: str | Path, suffix: str = "") -> Iterator[Path]:
    """A temporary path beside `target`; renamed onto it (with umask modes) when the block succeeds, removed
    when it fails. Write the temporary path by name (numpy, safetensors, open(..., "w"))."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=suffix)
    os.close(fd)
    try:
        yield Path(tmp)
        follow_umask(tmp)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is None:  # a failed write (a full disk) names no file: name the one being written
            raise OSError(exc.errno, exc.strerror or str(exc), str(target)) from exc
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(target: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Write `text` to `target` atomically."""
    with atomic_file(target) as tmp:
        tmp.write_text(text, encoding=encoding)
    return Path(target)


def write_json(target: str | Path, data: Any) -> Path:
    """Publish `data` as one JSON file (indent 1, the run folders' layout) atomically."""
    return write_text(target, json.dumps(data, indent=1))


def write_bytes(target: str | Path, data: bytes) -> Path:
    with atomic_file(target) as tmp:
        tmp.write_bytes(data)
    return Path(target)


def staging_dir(target: str | Path) -> Path:
    """An empty folder beside `target` (same filesystem, so it can be renamed onto it), named `.<name>.*`."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))


def scratch_dir(prefix: str) -> Path:
    """A new folder under the system's temporary folder (for outputs a caller did not name), with umask modes."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    follow_umask(folder)
    return folder


def publish_dir(staging: str | Path, target: str | Path) -> Path:
    """Give a finished staging folder umask modes and rename it to `target` (which must not exist)."""
    follow_umask_tree(staging)
    os.replace(staging, target)
    return Path(target)


def save_safetensors(tensors: dict, target: str | Path, metadata: dict[str, str] | None = None) -> Path:
    """safetensors' `save_file`, atomically and with umask modes (safetensors itself writes 0600)."""
    # deferred: keeps `vrh-lmms --help` free of safetensors.torch
    from safetensors.torch import save_file

    with atomic_file(target, suffix=".safetensors") as tmp:
        save_file(tensors, str(tmp), metadata=metadata)
    return Path(target)
