"""One exclusive lock per output, held for a whole command, so two runs never write one folder side by side.

The lock is an OS lock (`flock`, which the kernel drops when every process holding it has died) on the hidden file
`.<stem>.vrh-lmms.lock` beside the output, where `<stem>` is the output without a `.json` suffix: `--output x/heads`
and `x/heads.json` write the same side files (`x/heads.samples.npz`, ...), so they are one lock. (Inside the output,
the lock would count as content to the folder rules of vrh_lmms.base.owned and be moved with a published checkpoint.)
The holder (pid, command, start time, host) is written into the lock file through the locked descriptor, so a second
run's message names the process that really holds it.

A holder whose pid no longer runs on this host (SIGKILLed, its forked workers still holding the OS lock) is taken over
with a one-line note: its lock file is replaced by a fresh one. So that two runs starting together never both take
over (or take a lock file another has just replaced), every take, takeover and release of a lock happens under a
second, brief OS lock on the folder that holds the lock file (the "gate"); a live holder has always recorded itself
before the gate opens, so a dead pid in the record means no live run holds that file. Each lock, the gate included,
is checked after locking to be the file (or folder) the path still names, since one may be removed while another
process waits on it. (filelock, used for the heads registry, neither writes through its descriptor in every release
this package accepts nor serialises a takeover, hence the few lines of `fcntl` here.)
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from vrh_lmms.base.errors import VRHError

SUFFIX = ".vrh-lmms.lock"
POLL = 0.2  # seconds between tries while waiting (--wait)
_RETRIES = 100  # a lock or gate removed under us is retried this often before giving up (each retry is a race lost)


def lock_path(output: str | Path) -> Path:
    """The lock of `output`: one per set of side files (`x/heads` and `x/heads.json` share theirs)."""
    out = Path(output).expanduser().absolute()
    stem = out.with_suffix("") if out.suffix == ".json" else out
    return stem.with_name(f".{stem.name}{SUFFIX}")


def _holder_path(lock: Path) -> Path:
    """Where earlier versions recorded the holder, beside the lock (still read for a lock they left behind)."""
    return lock.with_name(lock.name + ".json")


def _parse(text: bytes | str) -> dict[str, Any] | None:
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def read_holder(lock: Path) -> dict[str, Any] | None:
    """The holder recorded in the lock file (else, for a lock an earlier version left, in the file beside it)."""
    try:
        text = Path(lock).read_bytes()
    except OSError:
        text = b""
    if text.strip():
        return _parse(text)
    try:
        return _parse(_holder_path(Path(lock)).read_bytes())
    except OSError:
        return None


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


def _same_file(fd: int, path: Path) -> bool:
    """Whether the open `fd` is still the file `path` names (not one removed or replaced since it was opened)."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)


def _lock_fd(path: Path, flags: int, blocking: bool) -> int | None:
    """Open `path` and take its OS lock: the descriptor, or None when another process holds it."""
    for _ in range(_RETRIES):
        fd = os.open(path, flags, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        if _same_file(fd, path):
            return fd
        os.close(fd)  # removed or replaced while we waited for it: lock what the path names now
    raise OSError(f"{path} keeps being replaced")


def _take_file(path: Path) -> int | None:
    return _lock_fd(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), blocking=False)


@contextmanager
def _gate(folder: Path) -> Iterator[None]:
    """The brief OS lock on `folder` under which every lock file in it is taken, taken over or released."""
    fd = None
    for _ in range(_RETRIES):
        folder.mkdir(parents=True, exist_ok=True)
        try:
            fd = _lock_fd(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0), blocking=True)
            break
        except FileNotFoundError:  # removed by a run that left it empty: make it again
            continue
    if fd is None:
        raise OSError(f"{folder} keeps being removed")
    try:
        yield
    finally:
        os.close(fd)


def _write_record(fd: int, record: dict[str, Any]) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(record).encode(), 0)


def _record_of(fd: int) -> dict[str, Any] | None:
    size = os.fstat(fd).st_size
    return _parse(os.pread(fd, size, 0)) if size else None


def _record(command: str) -> dict[str, Any]:
    return {"pid": os.getpid(), "command": command, "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def _take(path: Path, command: str) -> tuple[int | None, dict[str, Any] | None]:
    """One try, under the gate: (descriptor, the previous record) when taken, (None, the holder) when held."""
    with _gate(path.parent):
        fd = _take_file(path)
        if fd is None:
            holder = read_holder(path)
            if not is_stale(holder):
                return None, holder
            # Held only by the dead run's forked workers (a live run records itself before the gate opens): start a
            # fresh lock file; nobody opens the old one again.
            for old in (path, _holder_path(path)):
                with suppress(FileNotFoundError):
                    old.unlink()
            fd = _take_file(path)
            if fd is None:  # a process of an earlier version, which takes no gate, got it first
                return None, read_holder(path)
            previous = holder
        else:
            previous = _record_of(fd) or read_holder(path)
            with suppress(FileNotFoundError):
                _holder_path(path).unlink()  # an earlier version's record: its holder is gone, since we hold the lock
        try:
            _write_record(fd, _record(command))
        except BaseException:
            os.close(fd)
            raise
        return fd, previous


@contextmanager
def held(output: str | Path, command: str, wait: bool = False,
         note: Callable[[str], None] | None = None, wait_option: str = "--wait") -> Iterator[Path]:
    """Hold the lock of `output` for the block. Taken: one VRHError line naming the holder and `wait_option` (or,
    with `wait`, a note and a wait until it is free). `note` prints one-line notes (default: stderr)."""
    say = note or (lambda line: print(line, file=sys.stderr))
    path = lock_path(output)
    created = _first_missing(path.parent)  # folders this lock creates, removed again if the run leaves them empty
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise VRHError(f"{output}: cannot create the folder that holds it ({exc.strerror or exc})") from None
    try:
        fd, previous = _take(path, command)
        if fd is None:
            if not wait:
                raise VRHError(f"{output} is in use by {describe(previous)}; wait for it to end, or pass {wait_option}")
            say(f"vrh-lmms: note: {output} is in use by {describe(previous)}; waiting for it to end")
            while fd is None:
                time.sleep(POLL)
                fd, previous = _take(path, command)
    except OSError as exc:  # a read-only or vanishing parent folder: one line, before anything is written
        raise VRHError(f"{output}: cannot create its lock {path} ({exc.strerror or exc})") from None
    if previous and previous.get("pid") != os.getpid() and is_stale(previous):
        say(f"vrh-lmms: note: took over the lock of {output} left by {describe(previous)}, which no longer runs")
    try:
        yield path
    finally:
        _release(path, fd, created)


def _release(path: Path, fd: int, created: Path | None) -> None:
    """Clear the record and drop the lock (also for forked workers that inherited it); a run that wrote nothing
    removes the lock file and the folders it created, under the gate, while it still holds the lock."""
    try:
        with _gate(path.parent):
            os.ftruncate(fd, 0)
            if created is not None and _same_file(fd, path):
                _remove_if_only_locks(path, created)
    except OSError:
        pass  # the folder went away under us: nothing left to tidy
    finally:
        with suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)  # not just close: forked workers share this lock
        os.close(fd)


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
