"""vrh_lmms.base.console: what a library prints (Python, loguru, tqdm, C-level writes) goes to the log file, not the
terminal; the steps, the progress display and the summary reach the terminal; --verbose shows everything; a failure
before any log shows the captured tail. Each case runs in a fresh interpreter whose stdout / stderr are pipes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

NOISE = """
import os, sys
from loguru import logger
from tqdm import tqdm
print("py-stdout-noise")
sys.stderr.write("py-stderr-noise\\n")
os.write(2, b"c-level-noise\\n")
logger.warning("loguru-noise")
for _ in tqdm(range(3), desc="Model Responding"):
    pass
"""


def _run(tmp_path: Path, body: str, **env: str) -> subprocess.CompletedProcess:
    code = (f"from pathlib import Path\nfrom vrh_lmms.base import console\nout = Path({str(tmp_path)!r})\n"
            f"def noise():\n{textwrap.indent(NOISE, '    ')}\n{textwrap.dedent(body)}")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **env))


def test_library_output_goes_to_the_log_and_the_summary_to_the_terminal(tmp_path):
    proc = _run(tmp_path, """
        with console.session():
            noise()  # before the folder is claimed: kept, then moved into the log
            console.log_to(out / "vrh-lmms.log")
            console.step("[1/2] step one")
            bar = console.bar(3, "sweep", "config")
            for _ in range(3):
                bar.update(1)
            noise()
            console.print_summary(*console.files_table("Done", [(out / "vrh-lmms.log", "the log")]))
        """)
    assert proc.returncode == 0, proc.stderr
    terminal = proc.stdout + proc.stderr
    assert "[1/2] step one" in proc.stderr and "Done" in proc.stdout and str(tmp_path / "vrh-lmms.log") in proc.stdout
    assert "noise" not in terminal and "Model Responding" not in terminal
    log = (tmp_path / "vrh-lmms.log").read_text()
    assert log.startswith("# vrh-lmms log\n")
    for word in ("py-stdout-noise", "py-stderr-noise", "c-level-noise", "loguru-noise"):
        assert log.count(word) == 2, word  # both rounds: before and after log_to
    assert "Model Responding" in log


def test_verbose_shows_everything_and_writes_no_log(tmp_path):
    proc = _run(tmp_path, """
        with console.session(verbose=True):
            console.log_to(out / "vrh-lmms.log")
            noise()
            console.print_summary("Done")
        """)
    assert proc.returncode == 0, proc.stderr
    for word in ("py-stdout-noise", "py-stderr-noise", "c-level-noise", "loguru-noise", "Model Responding", "Done"):
        assert word in proc.stdout + proc.stderr, word
    assert not (tmp_path / "vrh-lmms.log").exists()


def test_an_unexpected_failure_before_a_log_shows_the_captured_tail(tmp_path):
    proc = _run(tmp_path, """
        with console.session():
            noise()
            raise RuntimeError("boom")
        """)
    assert proc.returncode == 1 and "c-level-noise" in proc.stderr and "RuntimeError: boom" in proc.stderr
    assert not list(tmp_path.iterdir())


def test_a_bad_input_error_stays_one_line_from_the_cli(tmp_path):
    """A VRHError's one line is the whole story: the captured output is not shown with it."""
    proc = subprocess.run([sys.executable, "-m", "vrh_lmms", "report", str(tmp_path / "missing"), "--output",
                           str(tmp_path / "r")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("vrh-lmms: error:"), proc.stderr


def test_a_command_that_printed_nothing_leaves_no_log(tmp_path):
    proc = _run(tmp_path, """
        with console.session():
            console.log_to(out / "vrh-lmms.log")
            console.print_summary("Done")
        """)
    assert proc.returncode == 0 and "Done" in proc.stdout, proc.stderr
    assert not (tmp_path / "vrh-lmms.log").exists()


SUMMARY = """
    from rich.text import Text
    with console.session():
        console.print_summary(Text("verdict " * 30, style="bold"),
                              *console.files_table("Written", [(out / ("deep/" * 20) / "report.html", "the report")]))
    """


def test_summary_prose_wraps_at_the_terminal_and_a_path_stays_whole(tmp_path):
    """On a 60-column terminal the 240-character verdict wraps between words; the file row keeps its path on one
    line; piped, nothing is wrapped (one line per line, for grep)."""
    path = str(tmp_path / ("deep/" * 20) / "report.html")
    tty = _run(tmp_path, SUMMARY, FORCE_COLOR="1", COLUMNS="60", TTY_COMPATIBLE="1")
    assert tty.returncode == 0, tty.stderr
    lines = re.sub(r"\x1b\[[0-9;]*m", "", tty.stdout).splitlines()
    prose = [line for line in lines if line.startswith("verdict")]
    assert len(prose) == 5 and all(len(line) <= 60 for line in prose), lines
    assert any(line.startswith(path) and line.endswith("the report") for line in lines), lines
    piped = _run(tmp_path, SUMMARY, COLUMNS="60")
    assert ("verdict " * 30).strip() in piped.stdout and f"{path}  the report" in piped.stdout


LIBRARY_CALL = """
    import sys, warnings
    from tqdm import tqdm
    warnings.simplefilter("error")  # tqdm.auto's 'IProgress not found' would fail the run
    sys.modules.setdefault("ipykernel", type(sys)("ipykernel"))  # as in a notebook (this one without ipywidgets)
    with console.quiet_libraries():
        print("py-stdout-noise")
        for _ in tqdm(range(3), desc="Model Responding"):
            pass
        bar = console.bar(3, "evaluate vrh_demo_grounding", "doc")
        bar.update(3)
        bar.close()
    print("after")
    try:
        with console.quiet_libraries():
            sys.stderr.write("what went wrong\\n")
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    """


def test_library_calls_show_one_bar_and_hold_the_libraries_output(tmp_path):
    """Library use (a notebook, no session): a call's own bar shows, the libraries' bars and prints do not; a call
    that fails shows what they wrote; no 'IProgress not found' warning where ipywidgets is missing."""
    proc = _run(tmp_path, LIBRARY_CALL)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "after\n"
    assert "evaluate vrh_demo_grounding" in proc.stderr and "3/3" in proc.stderr
    assert "Model Responding" not in proc.stderr and "noise" not in proc.stderr
    assert "what went wrong" in proc.stderr and "IProgress" not in proc.stderr
