"""What a command shows a person: one rich progress display for the whole command, the libraries' own output
(lmms-eval's loguru warnings and per-run tqdm bars, transformers and datasets messages) kept in a log file in the
output folder, and a short summary naming the files written.

`session(verbose=False)` wraps a command (vrh_lmms.cli): file descriptors 1 and 2 are pointed at a temporary file, so
everything a library prints, from Python or from C, lands there; the progress display and the summary write to the
terminal through their own copies of the original descriptors. A runner that has claimed its output folder calls
`log_to(path)` (the outermost call wins, so the demo's log holds its discovery and sweep too): what was captured so far
is appended there and the descriptors point at the log from then on, so it grows as the run goes. Where no log was
claimed (a refused folder), nothing is kept, and a command that fails unexpectedly shows the captured text's tail.
`verbose=True` captures nothing: every library line and bar shows as it comes, as without a session.

Library use (no session): `bar` falls back to tqdm and `step` to print, as before.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text
from tqdm import tqdm

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.owned import LOG_HEADER

LOG_NAME = "vrh-lmms.log"  # in an output folder; a heads file's log is `<stem>.log` beside it
TAIL_LINES = 30  # of the captured output shown when a command fails before it had a log file


class _Session:
    def __init__(self, verbose: bool, show: bool):
        self.verbose = verbose
        self.show = show  # rank 0 only: other ranks of a multi-process run keep quiet
        self.log_path: Path | None = None
        self.capture = None  # the file descriptors 1 and 2 point at: a temporary file, then the log
        self.logging = False  # whether `capture` is the log file
        self.empty_log_size: int | None = None
        self.saved: dict[int, int] = {}
        self.err = self.out = None  # rich Consoles on the original stderr / stdout
        self.progress = None
        self.task = None
        self.opened: list = []  # streams this session opened (closed at the end)
        self.started = time.time()

    # ---------------------------------------------------------------------------------------------- capture
    def start(self) -> None:
        if not self.verbose:
            _flush()
            self.capture = tempfile.TemporaryFile(mode="w+b")
            for fd in (1, 2):
                self.saved[fd] = os.dup(fd)
                os.dup2(self.capture.fileno(), fd)
        # the terminal, through copies of the original descriptors (closed at the end)
        self.err = Console(file=self._terminal(2), stderr=True, highlight=False)
        self.out = Console(file=self._terminal(1), highlight=False)
        # the display lives on a terminal only (piped or in a file, a redrawn bar is only noise)
        if self.show and not self.verbose and self.err.is_terminal:
            # library writes are captured at the descriptors, so the display must not redirect sys.stdout itself
            self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                     MofNCompleteColumn(), TextColumn("{task.fields[unit]}"), TimeElapsedColumn(),
                                     console=self.err, redirect_stdout=False, redirect_stderr=False, transient=True)
            self.progress.start()
            self.task = self.progress.add_task("starting", total=None, unit="")

    def _terminal(self, fd: int):
        """The stream that reaches the person: a copy of the original descriptor, or sys.stdout / sys.stderr
        where they are not backed by it (pytest's capsys; an embedding application)."""
        stream = sys.stdout if fd == 1 else sys.stderr
        try:
            backed = stream.fileno() == fd
        except (AttributeError, ValueError, OSError):  # io.UnsupportedOperation is an OSError and a ValueError
            backed = False
        if not backed:
            return stream
        handle = os.fdopen(os.dup(self.saved.get(fd, fd)), "w", buffering=1, encoding="utf-8", errors="replace")
        self.opened.append(handle)
        return handle

    def keep_in_log(self) -> bool:
        """Move what was captured so far into the log file and point the descriptors at it, so the log grows as
        the run goes (`tail -f` works); False where its folder does not exist (yet)."""
        if self.capture is None or self.logging or not self.log_path.parent.is_dir():
            return False
        _flush()
        fresh = not self.log_path.exists()
        log = open(self.log_path, "ab")
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        log.write(((f"{LOG_HEADER}\n" if fresh else "") + f"\n## {stamp} vrh-lmms {' '.join(sys.argv[1:])}\n")
                  .encode("utf-8"))
        self.empty_log_size = log.tell() if fresh else None  # a new log that stays this size holds nothing
        self.capture.seek(0)
        log.write(self.capture.read())
        log.flush()
        for fd in (1, 2):
            os.dup2(log.fileno(), fd)
        self.capture.close()
        self.capture, self.logging = log, True
        return True

    def finish(self, failed: bool) -> None:
        """Restore the descriptors and keep the captured text; `failed`: an unexpected error (not a VRHError,
        whose one line says everything, nor an interrupt), where the captured text helps to understand it."""
        if self.progress is not None:
            self.progress.stop()
        if self.log_path is not None:
            self.keep_in_log()  # a folder made after log_to
        _flush()
        for fd, saved in self.saved.items():
            os.dup2(saved, fd)
            os.close(saved)
        if self.capture is None:
            return
        if self.logging:
            self.capture.close()
            if self.empty_log_size is not None and self.log_path.stat().st_size == self.empty_log_size:
                self.log_path.unlink()  # nothing was printed: no log
            if failed and self.show:
                self.err.print(f"vrh-lmms: the libraries' output of this run is in {self.log_path}")
            return
        self.capture.seek(0)
        text = self.capture.read().decode("utf-8", errors="replace")
        self.capture.close()
        if failed and text.strip() and self.show:
            tail = text.replace("\r", "\n").splitlines()[-TAIL_LINES:]
            self.err.print("\n".join(tail), markup=False)

    def close_consoles(self) -> None:
        for handle in self.opened:
            handle.close()


_active: _Session | None = None


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, ValueError, OSError):
            pass


def _rank() -> int:
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


@contextmanager
def session(verbose: bool = False) -> Iterator[None]:
    """Run a command with one progress display and its libraries' output kept for the log (see module doc)."""
    global _active
    if _active is not None:  # nested: the outer session already owns the terminal
        yield
        return
    s = _Session(verbose, show=_rank() == 0)
    s.start()
    _active = s
    failed = False
    try:
        yield
    except (VRHError, KeyboardInterrupt):
        raise
    except BaseException:
        failed = True
        raise
    finally:
        _active = None
        s.finish(failed)
        s.close_consoles()


def active() -> bool:
    return _active is not None


def verbose() -> bool:
    """True without a session (library use shows everything) or with --verbose."""
    return _active is None or _active.verbose


def log_to(path: str | Path) -> None:
    """Keep this command's captured library output in `path` (a file in a folder the caller has claimed); the
    first call of a command wins."""
    if _active is not None and _active.log_path is None:
        _active.log_path = Path(path)
        _active.keep_in_log()


def log_path() -> Path | None:
    """Where this command's captured output will be kept (None: nothing is captured)."""
    return None if _active is None or _active.capture is None else _active.log_path


def log_row() -> list[tuple[Path, str]]:
    """The log file's row for a summary's file list (none without a captured log)."""
    path = log_path()
    return [] if path is None else [(path, "lmms-eval's and the other libraries' output (--verbose shows it)")]


def step(text: str, line: bool = True) -> None:
    """What the command does next: the progress display shows it and, with `line`, a line above the display keeps
    it (commands whose input is still to be checked pass line=False: bad input gets its one-line error alone)."""
    if _active is None:
        if line:
            print(text)
        return
    if not _active.show:
        return
    if line:
        _active.err.print(text, markup=False, highlight=False)
    if _active.progress is not None:
        _active.progress.update(_active.task, description=_plain(text), total=None, completed=0, unit="")


def note(text: str) -> None:
    """A message for the person (a warning, a note) on stderr, above the progress display."""
    if _active is None:
        print(text, file=sys.stderr)
    elif _active.show:
        _active.err.print(text, markup=False, highlight=False)


def _plain(text: str) -> str:
    return escape(text if len(text) <= 60 else text[:57] + "...")


class _Bar:
    """The session's display as a tqdm-like bar: update, set_description, close, iteration."""

    def __init__(self, total: int | None, desc: str, unit: str):
        self.desc = desc
        self.n = 0
        self.progress, self.task = _active.progress, _active.task
        if self.progress is not None:
            self.progress.update(self.task, description=_plain(desc), total=total, completed=0, unit=f"{unit}s")

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.progress is not None:
            self.progress.update(self.task, completed=self.n)

    def set_description(self, desc: str) -> None:
        if self.progress is not None:
            self.progress.update(self.task, description=_plain(f"{self.desc} {desc}"))

    def close(self) -> None:
        pass


def bar(total: int | None, desc: str, unit: str, enabled: bool = True) -> Any:
    """A progress bar: the session's one display, or a tqdm bar where no session runs (or with --verbose); inside
    `quiet_libraries` it writes to the stream the libraries' output was taken from."""
    if _active is None or _active.verbose or not enabled:
        return _tqdm_class()(total=total, desc=desc, unit=unit, disable=not enabled, file=_library_stream)
    return _Bar(total, desc, unit)


def _tqdm_class() -> type:
    """tqdm's notebook widget where a notebook can draw it (ipywidgets installed), else its text bar: tqdm.auto in a
    notebook without ipywidgets warns 'IProgress not found' and falls back to the text bar anyway."""
    if "ipykernel" in sys.modules:
        try:
            # deferred: optional dependency (ipywidgets, tqdm's notebook widget), in a notebook only
            import ipywidgets  # noqa: F401
            from tqdm.notebook import tqdm as widget
        except ImportError:
            return tqdm
        return widget
    return tqdm


_library_stream = None  # inside quiet_libraries: where our one bar writes (the caller's stderr)


@contextmanager
def quiet_libraries() -> Iterator[None]:
    """Library use (a notebook, a script; no session): one progress bar per call instead of every library's (datasets'
    split generation, transformers' weight loading, lmms-eval's request building and postprocessing, each a line in a
    notebook) and their prints: what they write to sys.stdout / sys.stderr during the call is held back, and shown
    only if the call fails. Our bar (`bar`) writes to the stderr the call started with. Inside a session, or nested,
    nothing changes."""
    global _library_stream
    if _active is not None or _library_stream is not None:
        yield
        return
    held = io.StringIO()
    _library_stream = sys.stderr
    try:
        with contextlib.redirect_stdout(held), contextlib.redirect_stderr(held):
            yield
    except BaseException:
        tail = held.getvalue().replace("\r", "\n").splitlines()[-TAIL_LINES:]
        if tail:
            print("\n".join(tail), file=sys.stderr)
        raise
    finally:
        _library_stream = None


def track(items: Iterable, total: int, desc: str, unit: str, enabled: bool = True) -> Iterator:
    b = bar(total, desc, unit, enabled)
    try:
        for item in items:
            yield item
            b.update(1)
    finally:
        b.close()


def print_summary(*renderables: Any) -> None:
    """The end of a command: rendered on stdout (plain text where stdout is not a terminal). On a terminal, prose
    wraps at its width (between words); a file row of `files_table` is never wrapped or cut (a path stays whole and
    can be copied), nor is anything where stdout is not a terminal (a pipe, a file: one line per line, for grep);
    tables and markdown fit the width."""
    if _active is not None and not _active.show:
        return
    if _active is not None and _active.progress is not None:  # the summary ends the command: the display goes
        _active.progress.stop()
        _active.progress = None
    target = Console(highlight=False) if _active is None else _active.out
    for item in renderables:
        for part in (item if isinstance(item, list) else [item]):
            if isinstance(part, str):
                part = Text(part)
            whole = isinstance(part, Text) and (part.no_wrap or not target.is_terminal)
            target.print(part, soft_wrap=whole)


def files_table(title: str, files: Iterable[tuple[str | Path, str]]) -> list[Any]:
    """`title` above one `path  what it is` line per file written (paths as given: relative where they were)."""
    rows = [(str(path), what) for path, what in files]
    width = max((len(path) for path, _ in rows), default=0)
    lines = [Text.assemble((path.ljust(width), "bold"), "  ", what) for path, what in rows]
    for line in lines:
        line.no_wrap = True  # print_summary keeps a path whole, on one line, on a terminal too
    return [Text(title, style="bold"), *lines]


def elapsed() -> float:
    return 0.0 if _active is None else time.time() - _active.started
