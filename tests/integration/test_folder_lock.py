"""One lock per output, between real processes: a second run on a held output is refused in one line naming the
holder, `--wait` proceeds once the holder ends, and a lock whose holder was killed is taken over with a note."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from vrh_lmms.base import folder_lock
from vrh_lmms.cli import COMMANDS, OUTPUT_OF, build_parser, main, subparser

ENV = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))

HOLD = textwrap.dedent("""
    import sys, time
    from vrh_lmms.base import folder_lock
    with folder_lock.held(sys.argv[1], "vrh-lmms sweep"):
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
""")

# Holds the OS lock (flock, as filelock takes it) from a forked child and records the parent, which then dies: what a
# killed run whose forked workers live on leaves behind.
ORPHAN = textwrap.dedent("""
    import fcntl, json, os, socket, sys, time
    from vrh_lmms.base import folder_lock
    path = folder_lock.lock_path(sys.argv[1])
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    folder_lock._holder_path(path).write_text(json.dumps(
        {"pid": os.getpid(), "command": "vrh-lmms demo", "host": socket.gethostname(), "started": "then"}))
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)
    print("held", flush=True)
    os._exit(0)
""")


def _hold(out, seconds: float, script: str = HOLD) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", script, str(out), str(seconds)], stdout=subprocess.PIPE, text=True,
                            env=ENV)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _synth(out, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["vrh-lmms", "synth", str(out), "--split", "test=2", *extra], capture_output=True,
                          text=True, env=ENV, timeout=120)


def test_second_run_is_refused_while_the_first_holds_the_folder(tmp_path):
    out = tmp_path / "data"
    holder = _hold(out, 60)
    try:
        done = _synth(out)
        assert done.returncode == 2
        line = done.stderr.strip()
        assert "\n" not in line and f"pid {holder.pid}" in line and "vrh-lmms sweep" in line
        assert socket.gethostname() in line and "started 20" in line and "--wait" in line
        assert not out.exists()  # nothing was written
    finally:
        holder.kill()
        holder.wait()
    assert _synth(out).returncode == 0  # the OS dropped the killed holder's lock


def test_wait_proceeds_after_the_holder_ends(tmp_path):
    out = tmp_path / "data"
    holder = _hold(out, 3)
    start = time.monotonic()
    done = _synth(out, "--wait")
    assert holder.wait() == 0
    assert done.returncode == 0, done.stderr
    assert "waiting for it to end" in done.stderr and f"pid {holder.pid}" in done.stderr
    assert time.monotonic() - start > 1.5 and (out / "test.parquet").is_file()


def test_lock_of_a_killed_holder_is_taken_over(tmp_path):
    out = tmp_path / "data"
    proc = _hold(out, 0, ORPHAN)
    dead = proc.pid
    proc.wait()
    try:
        with pytest.raises(Exception):  # the OS lock is still held (by the orphaned child)
            from filelock import FileLock
            FileLock(str(folder_lock.lock_path(out)), thread_local=False).acquire(timeout=0)
        done = _synth(out)
        assert done.returncode == 0, done.stderr
        assert f"took over the lock of {out} left by pid {dead} (vrh-lmms demo" in done.stderr
    finally:
        _kill_lock_holders(folder_lock.lock_path(out))


def test_recorded_dead_pid_without_os_lock_is_taken_over(tmp_path):
    out = tmp_path / "data"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    path = folder_lock.lock_path(out)
    folder_lock._holder_path(path).write_text(json.dumps(
        {"pid": gone.pid, "command": "vrh-lmms sweep", "host": socket.gethostname(), "started": "earlier"}))
    done = _synth(out)
    assert done.returncode == 0, done.stderr
    assert f"left by pid {gone.pid} (vrh-lmms sweep, started earlier" in done.stderr
    assert not folder_lock._holder_path(path).exists()  # the run removed its own record at the end


def _kill_lock_holders(path) -> None:
    """Kill the test's orphan (found by the lock file among its open files)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}").startswith(str(path)) for fd in fds):
                os.kill(int(pid), signal.SIGKILL)
        except OSError:
            continue


def _argv(name: str, out: str) -> list[str]:
    """The command with dummy values for its required arguments and `out` as its output."""
    parser = build_parser(only=name)
    argv = [name]
    for action in subparser(parser, name)._actions:
        dest = OUTPUT_OF[name]
        if action.dest == dest:
            value = [out]
        elif action.required or (not action.option_strings and action.dest != "help"):
            value = [str(action.choices[0]) if action.choices else "x"]
        else:
            continue
        argv += ([action.option_strings[0]] if action.option_strings else []) + value
    return argv


@pytest.mark.parametrize("name", sorted(OUTPUT_OF))
def test_every_output_command_takes_the_lock(name, tmp_path, capsys):
    out = str(tmp_path / "out")
    holder = _hold(out, 60)
    try:
        assert main(_argv(name, out)) == 2
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"vrh-lmms: error: {out} is in use by pid {holder.pid} (vrh-lmms sweep") and "\n" not in err


def test_every_command_that_writes_is_locked():
    writes = {name for name in COMMANDS if any(
        a.dest in ("output", "out", "out_dir") for a in subparser(build_parser(only=name), name)._actions)}
    assert writes <= set(OUTPUT_OF), writes - set(OUTPUT_OF)


def test_locks_of_outputs_inside_a_folder_are_neither_foreign_nor_removed(tmp_path):
    """`vrh-lmms report run/sweep --output run/report` leaves run/.report.vrh-lmms.lock: rerunning the command that
    owns run/ (with --force) must neither refuse it as foreign nor delete a lock another run may hold."""
    from vrh_lmms.base import owned

    folder = tmp_path / "run"
    with folder_lock.held(folder / "report", "vrh-lmms report"):
        (folder / "result.json").write_text("{}")
        layout = {"result.json": None}
        assert owned.foreign_entries(folder, layout) == []
        owned.prepare_output(folder, layout, force=True, what="a result")
        assert sorted(p.name for p in folder.iterdir()) == [".report.vrh-lmms.lock"]  # the holder is recorded in it
        owned.prepare_output(folder, layout, force=False, what="a result")  # only locks left: empty for the rules


def test_output_whose_lock_cannot_be_made_is_one_line(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / "out"
    assert main(["synth", str(out), "--split", "test=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"vrh-lmms: error: {out}: cannot create the folder that holds it") and "\n" not in err
