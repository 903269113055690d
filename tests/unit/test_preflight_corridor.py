"""The corridor's one pre-load check sequence (vrh_lmms.runs.preflight): every job's checks run in one order,
hand what they found forward, stop at a refusal before anything later (a folder claimed, a model loaded), and no job
writes a check sequence of its own."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import Geometry
from vrh_lmms.harness import lmms, preload
from vrh_lmms.runs import preflight as corridor
from vrh_lmms.runs.preflight import Checks, preflight
from vrh_lmms.runs.runner import result_job, result_layout

REPO = Path(__file__).resolve().parents[2]
G = Geometry(layers=2, heads=4, kv_heads=2, head_dim=16)


@pytest.fixture
def seen(monkeypatch):
    """Each harness check the corridor makes, recorded in order (nothing is imported, built or loaded)."""
    calls: list[str] = []
    plan = SimpleNamespace(args={}, geometry=G)
    monkeypatch.setattr(lmms, "check_task_names", lambda names: calls.append("task names"))
    monkeypatch.setattr(preload, "plan_args", lambda model, args: calls.append("model args") or plan)
    monkeypatch.setattr(lmms, "task_manager", lambda model, tasks: calls.append("task manager") or "tm")
    monkeypatch.setattr(lmms, "check_tasks", lambda tm, tasks: None)
    monkeypatch.setattr(preload, "plan_geometry", lambda p: calls.append("geometry") or p)
    heads_file = SimpleNamespace(geometry=G, ranking=[], extra={}, path="h.json")
    monkeypatch.setattr(corridor, "load_heads_file", lambda path: calls.append("heads file") or heads_file)
    monkeypatch.setattr(corridor, "check_heads_file_fits", lambda hf, g, allow_cross_model: calls.append("fits"))
    return calls


def _checks(tmp_path, calls, **overrides) -> Checks:
    def job(ready):
        calls.append("folder")
        assert ready.heads_file is not None and ready.tasks == ["t"]  # what the earlier checks found
        return result_job(tmp_path / "out", result_layout(None, "r.json"), "r.json", {"command": "x"}, "x run")

    fields = dict(tasks=["t"], settings=lambda: calls.append("settings"), heads_file="h.json", job=job,
                  with_heads_file=lambda ready: calls.append("beside the heads file"),
                  docs=lambda ready: calls.append("docs") or ["doc"])
    return Checks("x", "vrh_qwen25", "pretrained=p", **(fields | overrides))


def test_the_checks_run_in_one_order_and_hand_forward(tmp_path, seen):
    ready = preflight(_checks(tmp_path, seen))
    assert seen == ["settings", "task names", "model args", "heads file", "beside the heads file", "folder",
                    "task manager", "docs", "geometry", "fits"]
    assert ready.task_manager == "tm" and ready.docs == ["doc"] and ready.geometry == G
    assert ready.runner is not None and ready.runner.decision.resume is False
    assert not (tmp_path / "out").exists()  # nothing written: the runner claims later


def test_a_refusal_stops_the_corridor_before_the_folder(tmp_path, seen):
    def bad():
        seen.append("settings")
        raise VRHError("--limit must be positive")

    with pytest.raises(VRHError, match="--limit"):
        preflight(_checks(tmp_path, seen, settings=bad))
    assert seen == ["settings"]
    seen.clear()
    with pytest.raises(VRHError, match="x needs --heads-file"):
        preflight(_checks(tmp_path, seen, heads_file=None, needs_heads_file=True))
    assert seen == ["settings", "task names", "model args"]


def test_a_finished_one_result_job_stops_at_its_folder(tmp_path, seen):
    out = tmp_path / "out"
    out.mkdir()
    (out / "identity.json").write_text('{"command": "x"}')
    (out / "r.json").write_text("{}")
    ready = preflight(_checks(tmp_path, seen, stop_when_finished=True))
    assert ready.finished and seen[-1] == "folder"  # no task manager, no docs, no geometry


def test_a_job_without_tasks_skips_the_task_checks(tmp_path, seen):
    preflight(_checks(tmp_path, seen, tasks=None, job=None, with_heads_file=None))
    assert seen == ["settings", "model args", "heads file", "docs", "geometry", "fits"]


def test_no_job_writes_a_check_sequence_of_its_own():
    """The harness checks a preflight makes are called from the corridor only (the one `preflight`)."""
    calls = re.compile(r"\b(check_task_names|refuse_head_args|plan_geometry)\(")
    callers = {str(p.relative_to(REPO)) for p in (REPO / "vrh_lmms").rglob("*.py")
               if any(calls.search(line) and not line.lstrip().startswith("def ")
                      for line in p.read_text().splitlines())}
    assert callers == {"vrh_lmms/runs/preflight.py"}, callers
