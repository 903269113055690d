"""The runner (vrh_lmms.runs.runner) on a toy job (tests/support/toy_job.py): a fresh run, a resume that skips
finished units, a different run refused in one line, a killed unit that leaves nothing finished-looking, and no
model load when every unit is done."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.toy_job import UNITS, run_toy, toy_job

from vrh_lmms.base.errors import VRHError
from vrh_lmms.runs.runner import Runner, differing

TESTS = Path(__file__).resolve().parents[1]


def _statuses(out: Path) -> dict[str, str]:
    data = json.loads((out / "toy.json").read_text())
    return {u["id"]: u["status"] for u in data["configurations"]}


def test_fresh_run_publishes_every_unit_and_lists_it_done(tmp_path):
    out = tmp_path / "run"
    loads, ran = [], []
    run_toy(out, loads=loads, ran=ran)
    assert ran == UNITS and loads == ["model"]  # loaded once, for the first unit
    assert [json.loads((out / "units" / f"{u}.json").read_text())["value"] for u in UNITS] == [2, 4, 6]
    data = json.loads((out / "toy.json").read_text())
    assert list(data)[:2] == ["identity", "note"] and data["identity"] == {"model": "toy", "seed": 0}
    assert _statuses(out) == dict.fromkeys(UNITS, "done")


def test_resume_runs_only_the_unfinished_units(tmp_path):
    out = tmp_path / "run"
    run_toy(out)
    before = (out / "units" / "u1.json").stat().st_mtime_ns
    (out / "units" / "u2.json").unlink()
    ran = []
    run_toy(out, ran=ran)
    assert ran == ["u2"]
    assert (out / "units" / "u1.json").stat().st_mtime_ns == before  # a finished unit is not rewritten
    assert _statuses(out) == dict.fromkeys(UNITS, "done")


def test_no_model_load_when_every_unit_is_done(tmp_path):
    out = tmp_path / "run"
    run_toy(out)
    loads, ran = [], []
    runner = run_toy(out, loads=loads, ran=ran)
    assert loads == [] and ran == [] and runner.finished and runner.lm is None


def test_a_different_run_is_refused_in_one_line_naming_the_field(tmp_path):
    out = tmp_path / "run"
    run_toy(out)
    with pytest.raises(VRHError) as exc:
        Runner(toy_job(out, seed=1)).inspect()
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith(f"{out} holds a different toy run (seed differ); choose another --output or pass")
    assert differing({"a": 1, "b": 2}, {"a": 1, "c": 3}) == ["b", "c"]  # a field on one side only differs too
    ran = []
    run_toy(out, seed=1, force=True, ran=ran)  # --force replaces exactly the run's files
    assert ran == UNITS and json.loads((out / "toy.json").read_text())["identity"]["seed"] == 1


def test_replacing_a_run_that_finished_nothing_needs_no_force(tmp_path):
    out = tmp_path / "run"
    run_toy(out)
    for unit in UNITS:
        (out / "units" / f"{unit}.json").unlink()
    job = toy_job(out, seed=1)
    job.replace_unfinished = True
    assert Runner(job).inspect().clear
    run_toy(out)  # finished units again: now a different seed is refused, counting them
    job = toy_job(out, seed=1)
    job.replace_unfinished = True
    with pytest.raises(VRHError, match=r"\(seed differ\) with 3 finished unit\(s\); .* discard them$"):
        Runner(job).inspect()


def test_foreign_files_are_refused_even_with_force(tmp_path):
    out = tmp_path / "run"
    run_toy(out)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(VRHError, match="notes.txt"):
        Runner(toy_job(out, seed=1), force=True).inspect()
    assert (out / "notes.txt").read_text() == "mine"


def test_a_killed_unit_leaves_nothing_finished_and_is_redone(tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS.parent), str(TESTS)]))
    killed = subprocess.run([sys.executable, "-m", "support.toy_job", str(out), "u2"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr  # SIGKILL half way through u2's file
    names = sorted(p.name for p in (out / "units").iterdir())
    assert "u1.json" in names and "u2.json" not in names and "u3.json" not in names
    leftovers = [n for n in names if n.startswith(".u2.json.")]
    assert leftovers and '"unit": "u2"' in (out / "units" / leftovers[0]).read_text()  # the half-written file
    assert _statuses(out) == {"u1": "done", "u2": "pending", "u3": "pending"}
    ran = []
    run_toy(out, ran=ran)
    assert ran == ["u2", "u3"]
    assert sorted(p.name for p in (out / "units").iterdir()) == [f"{u}.json" for u in UNITS]  # leftover cleared
    assert json.loads((out / "units" / "u2.json").read_text()) == {"unit": "u2", "value": 4}


def test_units_recorded_in_the_manifest_resume_without_files(tmp_path):
    """A job whose units write no file of their own (replicate's stages) is resumed from its manifest's record; a
    folder of ours that an earlier version left without a manifest resumes where the job allows it."""
    from support.toy_job import LAYOUT

    from vrh_lmms.runs.runner import Job, Manifest

    out = tmp_path / "run"
    record: dict = {"stages": {}}

    def job() -> Job:
        return Job(out=out, layout=LAYOUT, manifest=Manifest(out / "toy.json"), identity={"model": "toy"},
                   units=list(UNITS), units_key=None, fields=lambda: dict(record),
                   done_in_manifest=lambda m: [u for u, s in (m.get("stages") or {}).items() if s == "done"],
                   resume_without_manifest=True)

    def run(stop_after: str | None = None) -> list[str]:
        runner, ran = Runner(job()), []
        runner.inspect()
        record.update({k: v for k, v in (runner.recorded() or {}).items() if k != "identity"})
        runner.claim()
        for uid in runner.pending:
            ran.append(uid)
            record["stages"][uid] = "done"
            runner.finish(uid)
            if uid == stop_after:
                break
        return ran

    assert run(stop_after="u1") == ["u1"]
    assert json.loads((out / "toy.json").read_text()) == {"identity": {"model": "toy"}, "stages": {"u1": "done"}}
    record["stages"] = {}  # a new process: only the manifest remembers
    assert run() == ["u2", "u3"]
    (out / "toy.json").unlink()
    (out / "units").mkdir()  # something of ours, no manifest: resumed, not refused
    record["stages"] = {}
    assert Runner(job()).inspect().resume and run() == UNITS


# ------------------------------------------------------------------------------------------------ one result
def _result_run(out: Path, seed: int = 0, force: bool = False, loads: list | None = None, fail: bool = False):
    """A one-result job (attention-maps, locate, rank, kv-cache): a figure, then the result published last."""
    from vrh_lmms.base import atomic

    runner = Runner(_job(out, seed), force)
    runner.inspect()
    if runner.finished:
        return runner
    runner.claim()

    def unit(_: str) -> None:
        runner.model(lambda: (loads if loads is not None else []).append("model"))
        atomic.write_text(out / "fig_1.png", "figure")
        if fail:
            raise RuntimeError("killed before the result")
        atomic.write_text(out / "result.json", json.dumps({"seed": seed}))

    runner.run(unit)
    return runner


def test_a_one_result_job_reruns_nothing_with_the_same_settings_and_refuses_others(tmp_path):
    out = tmp_path / "run"
    loads: list = []
    _result_run(out, loads=loads)
    assert loads == ["model"] and json.loads((out / "identity.json").read_text()) == {"command": "toy", "seed": 0}
    before = (out / "result.json").stat().st_mtime_ns
    runner = _result_run(out, loads=loads)
    assert loads == ["model"] and runner.finished and runner.lm is None  # nothing done, no model
    assert (out / "result.json").stat().st_mtime_ns == before
    assert "already holds this toy run, finished, with the same settings" in runner.complete_note()
    with pytest.raises(VRHError, match=r"holds a different toy run \(seed differ\); choose another --output or pass "
                                       r"--force to discard it$"):
        _result_run(out, seed=1, loads=loads)
    _result_run(out, force=True, loads=loads)  # --force runs the same settings again
    assert loads == ["model", "model"] and (out / "result.json").stat().st_mtime_ns != before
    _result_run(out, seed=1, force=True, loads=loads)
    assert json.loads((out / "result.json").read_text()) == {"seed": 1}


def test_a_one_result_job_killed_before_its_result_never_reads_as_complete(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError):
        _result_run(out, fail=True)
    assert not (out / "result.json").exists() and (out / "fig_1.png").is_file()
    assert Runner(_job(out)).inspect().clear  # redone whole, not resumed
    loads: list = []
    _result_run(out, loads=loads)  # the same settings: redone whole, no --force needed
    assert loads == ["model"] and json.loads((out / "result.json").read_text()) == {"seed": 0}
    with pytest.raises(RuntimeError):
        _result_run(out, seed=2, force=True, fail=True)
    _result_run(out, seed=3)  # other settings over a run that finished nothing: replaced without --force
    assert json.loads((out / "result.json").read_text()) == {"seed": 3}


def test_an_earlier_versions_result_folder_is_refused_then_replaced_with_force(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "result.json").write_text("{}")  # a result and no identity.json, as versions before the runner left it
    (out / "fig_1.png").write_text("figure")
    with pytest.raises(VRHError, match=r"\(no identity.json: an earlier version's\); .* --force to discard it$"):
        _result_run(out)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(VRHError, match="notes.txt"):  # what we did not write is refused, even with --force
        _result_run(out, force=True)
    (out / "notes.txt").unlink()
    _result_run(out, force=True)
    assert json.loads((out / "result.json").read_text()) == {"seed": 0}


def _job(out: Path, seed: int = 0):
    from vrh_lmms.runs.runner import result_job, result_layout

    return result_job(out, result_layout(None, "result.json", "fig_*.png"), "result.json",
                      {"command": "toy", "seed": seed}, "toy run")
