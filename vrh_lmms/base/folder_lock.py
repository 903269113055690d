"""One exclusive lock per output, held for a whole command, so two runs never write one folder side by side.

The lock (`filelock`, an OS lock the kernel drops when its process dies) is the hidden file `.<name>.vrh-lmms.lock`
beside the output (inside it, it would count as content to the folder rules of vrh_lmms.base.owned and be moved with a
published checkpoint); `<lock>.json` beside it names the holder (pid, command, start time, host) for the message a
second run gets. A holder whose pid no longer runs on this host (killed, its forked workers still holding the OS
lock) is taken over with a one-line note.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from vrh_lmms.base.errors import VRHError

SUFFIX = ".vrh-lmms.lock"


def lock_path(output: str | Path) -> Path:
    out = Path(output).expanduser().absolute()
    return out.with_name(f".{out.name}{SUFFIX}")


def _holder_path(lock: Path) -> Path:
    return lock.with_name(lock.name + ".json")


def read_holder(lock: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(_holder_path(lock).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def describe(holder: dict[str, Any] | None) -> str:
    if not holder:
        return "another process (no holder recorded)"
    return (f"pid {holder.get('pid')} ({holder.get('command')}, started {holder.get('started')} on "
            f"{holder.get('host')})")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def is_stale(holder: dict[str, Any] | None) -> bool:
    """A holder recorded on this host whose pid no longer runs."""
    if not holder or holder.get("host") != socket.gethostname():
        return False
    try:
        return not _alive(int(holder["pid"]))
    except (KeyError, TypeError, ValueError):
        return False


def _try(lock: FileLock, timeout: float, output: str | Path) -> bool:
    try:
        lock.acquire(timeout=timeout)
    except Timeout:
        return False
    except OSError as exc:  # a read-only or missing parent folder: one line, before anything is written
        raise VRHError(f"{output}: cannot create its lock {lock.lock_file} ({exc.strerror or exc})") from None
    return True


@contextmanager
def held(output: str | Path, command: str, wait: bool = False,
         note: Callable[[str], None] | None = None) -> Iterator[Path]:
    """Hold the lock of `output` for the block. Taken: one VRHError line naming the holder (or, with `wait`, a note
    and a wait until it is free). `note` prints one-line notes (default: stderr)."""
    say = note or (lambda line: print(line, file=sys.stderr))
    path = lock_path(output)
    created = _first_missing(path.parent)  # folders this lock creates, removed again if the run leaves them empty
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise VRHError(f"{output}: cannot create the folder that holds it ({exc.strerror or exc})") from None
    lock = FileLock(str(path), thread_local=False)
    previous = read_holder(path)
    if not _try(lock, 0, output):
        holder = read_holder(path)
        if is_stale(holder):  # its OS lock outlives it in forked children: start a fresh lock file
            with suppress(OSError):
                path.unlink()
            lock = FileLock(str(path), thread_local=False)
            previous = holder
        if not _try(lock, 0, output):
            holder = read_holder(path)
            if not wait:
                raise VRHError(f"{output} is in use by {describe(holder)}; wait for it to end, or pass --wait")
            say(f"vrh-lmms: note: {output} is in use by {describe(holder)}; waiting for it to end")
            _try(lock, -1, output)
            previous = None
    if previous and previous.get("pid") != os.getpid() and is_stale(previous):
        say(f"vrh-lmms: note: took over the lock of {output} left by {describe(previous)}, which no longer runs")
    me = {"pid": os.getpid(), "command": command, "host": socket.gethostname(),
          "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    holder_file = _holder_path(path)
    tmp = holder_file.with_name(f".{holder_file.name}.{os.getpid()}")
    try:
        tmp.write_text(json.dumps(me), encoding="utf-8")
        os.replace(tmp, holder_file)
        yield path
    finally:
        if read_holder(path) == me:
            holder_file.unlink(missing_ok=True)
        lock.release(force=True)
        if created is not None:
            _remove_if_only_locks(path, created)


def _first_missing(folder: Path) -> Path | None:
    """The outermost of `folder` and its parents that does not exist yet (None: `folder` exists)."""
    missing = None
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            break
        missing = candidate
    return missing


def _remove_if_only_locks(lock: Path, top: Path) -> None:
    """A run refused before it wrote anything leaves no folder behind: when the folder of `lock` holds nothing but
    this lock (and its holder file), both go, and so does each folder up to `top` (those the lock created) that is
    then empty."""
    folder = lock.parent
    ours = {lock.name, _holder_path(lock).name}
    try:
        if any(entry.name not in ours for entry in folder.iterdir()):
            return
    except OSError:
        return
    for name in ours:
        with suppress(OSError):
            (folder / name).unlink()
    current = folder
    while True:
        try:
            current.rmdir()  # only an empty folder goes
        except OSError:
            return
        if current == top:
            return
        current = current.parent
