"""docs/configuration.md cannot drift from the code: its table of `VRH_*` variables names exactly those the code
reads, its per-benchmark keys are the benchmarks', its run-file column says what a run file records, and its table
of commands is the command table's."""

from __future__ import annotations

import re
from pathlib import Path

from vrh_lmms.base.data_env import BENCHMARK_KEYS
from vrh_lmms.base.runfile import UNRECORDED_ENV
from vrh_lmms.cli import BY_NAME, CONFIG_COMMANDS

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "configuration.md").read_text()
# Names that look like variables but are not read from the environment.
NOT_VARIABLES = {"VRH_MODEL_ARGS": "the Python table of model args (vrh_lmms.base.model_args)"}
# A starting point to copy, not code that runs: its VRH_MYBENCH_* are the per-benchmark rule's, for a new KEY.
TEMPLATES = ROOT / "tasks" / "_template"


def _code_variables() -> set[str]:
    names = set()
    for folder in ("vrh_lmms", "model_wrappers", "tasks"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in (".py", ".yaml") and TEMPLATES not in path.parents:
                names |= set(re.findall(r"VRH_[A-Z0-9_]*[A-Z0-9]", path.read_text(encoding="utf-8")))
    return names - set(NOT_VARIABLES)


def _rows() -> dict[str, list[str]]:
    """The variables table: name -> its cells (what, default, run file)."""
    rows = {}
    for line in DOC.splitlines():
        match = re.match(r"\| `(VRH_[A-Z0-9_]+)` \|(.*)\|$", line)
        if match:
            rows[match.group(1)] = [c.strip() for c in match.group(2).split(" | ")]
    return rows


def test_the_table_lists_exactly_the_variables_the_code_reads():
    assert len(_code_variables()) > 30
    assert set(_rows()) == _code_variables()


def test_a_run_files_env_accepts_exactly_the_documented_variables():
    """vrh_lmms.base.runfile.known_variables is this table (and the per-benchmark rule's names of every key)."""
    from vrh_lmms.base.data_env import benchmark_variables
    from vrh_lmms.base.runfile import known_variables

    rule = set(benchmark_variables())
    assert set(_rows()) <= known_variables()
    assert known_variables() - rule == set(_rows()) - rule


def test_the_run_file_column_says_what_a_run_file_records():
    rows = _rows()
    assert all(len(cells) == 3 and cells[0] and cells[1] for cells in rows.values())
    assert {name for name, cells in rows.items() if cells[2] == "-"} == set(UNRECORDED_ENV)
    assert {cells[2] for name, cells in rows.items() if name not in UNRECORDED_ENV} == {"env"}


def test_the_per_benchmark_keys_are_the_benchmarks():
    from vrh_lmms.tasks.common import grounding_data, vqa_data

    keys = {b.key for b in grounding_data.BENCHMARKS.values()} | {b.key for b in vqa_data.VQA_BENCHMARKS.values()}
    listed = re.search(r"The keys: (.*?)\. A benchmark", DOC, re.S).group(1)
    assert set(re.findall(r"`([A-Z0-9_]+)`", listed)) == keys
    assert set(BENCHMARK_KEYS) == keys  # what a run file's env: may name under the per-benchmark rule


def test_the_commands_table_is_the_command_tables():
    listed = dict(re.findall(r"^\| `([a-z-]+)` \| (.+) \|$", DOC, re.M))
    assert list(listed) == list(CONFIG_COMMANDS)
    for name, where in listed.items():
        command = BY_NAME[name]
        assert ("beside" in where) == (command.run_file == "beside")
        assert f"`--{command.output.replace('_', '-')}`" in where or command.run_file == "beside"
