"""A report of an unfinished sweep (the folder a Ctrl-C'd `vrh-lmms sweep` leaves: its sweep.json, written by the
sweep's own manifest writer, lists 8 of 11 configurations pending) is refused in one line naming them; with
--allow-incomplete it goes on and says so in its first line and in report.json. A folder holding another sweep's
configuration is refused the same way."""

from __future__ import annotations

import json
import time

import numpy as np
from support.sweep_files import TASK, make_docs, sample_line, vrh_block, write_config

from vrh_lmms.base.heads.plan import plan_configurations
from vrh_lmms.cli import main
from vrh_lmms.runs.runner import Runner
from vrh_lmms.runs.sweep.checks import sweep_job
from vrh_lmms.runs.sweep.run import SweepSpec, describe_configurations, manifest_fields

CONFIGS = plan_configurations([2, 4], random_seeds=2, layer_matched=True, modes=["zero"])


def _sweep(root, done: int, extra: str | None = None):
    """The folder state of a sweep stopped after its first `done` configurations."""
    rng = np.random.default_rng(3)
    docs = make_docs(rng, n_images=30, sizes=(1, 3))
    spec = SweepSpec(model="vrh_qwen25", model_args="pretrained=org/Tiny-VLM-2B", tasks=[TASK],
                     heads_file="heads/tiny.json", configurations=CONFIGS)
    root.mkdir()
    finished = CONFIGS[:done] + ([] if extra is None else [CONFIGS[1].__class__(extra, "topk", 3, None, "zero",
                                                                               "top3")])
    for i, cfg in enumerate(finished):
        p = 0.8 if cfg.kind == "baseline" else 0.5
        lines = [sample_line(d, "correct" if rng.random() < p else "mislocated") for d in docs]
        write_config(root, cfg.id, vrh_block(cfg.id, cfg.kind, cfg.k or None, cfg.seed), lines)
    runner = Runner(sweep_job(root, spec.identity("0" * 64)))
    describe_configurations(runner.job, spec)
    runner.job.fields = lambda: manifest_fields(spec, time.time())
    runner.done = {c.id for c in CONFIGS[:done]}
    runner.write_manifest()
    return [c.id for c in CONFIGS[done:]]


def test_plan_has_eleven_configurations():
    assert len(CONFIGS) == 11


def test_interrupted_sweep_is_refused_then_flagged(tmp_path, capsys):
    pending = _sweep(tmp_path / "sweep", done=3)
    manifest = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert [c["id"] for c in manifest["configurations"] if c["status"] == "pending"] == pending and len(pending) == 8
    out = tmp_path / "report"
    assert main(["report", str(tmp_path / "sweep"), "--output", str(out), "--no-plots"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{tmp_path / 'sweep'}: 8 configuration(s) pending ({', '.join(pending[:4])} and 4 " \
        "more)" in err and "--allow-incomplete" in err
    assert not out.exists()

    assert main(["report", str(tmp_path / "sweep"), "--output", str(out), "--no-plots", "--allow-incomplete"]) == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["complete"] is False
    assert rep["pending"] == [{"folder": str(tmp_path / "sweep"), "configurations": pending, "unlisted": []}]
    md = (out / "report.md").read_text().splitlines()
    assert md[0].startswith("**Incomplete:** 1 sweep folder(s)") and "8 configuration(s) pending" in md[0]
    page = (out / "report.html").read_text()
    assert page.index("Incomplete:") < page.index("<h1")


def test_finished_sweep_is_reported_as_complete(tmp_path):
    assert _sweep(tmp_path / "sweep", done=11) == []
    out = tmp_path / "report"
    assert main(["report", str(tmp_path / "sweep"), "--output", str(out), "--no-plots"]) == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["complete"] is True and rep["pending"] == []
    assert (out / "report.md").read_text().startswith("# Visual retrieval heads")


def test_results_of_another_sweep_in_the_folder_are_refused(tmp_path, capsys):
    _sweep(tmp_path / "sweep", done=11, extra="topk3")
    assert main(["report", str(tmp_path / "sweep"), "--output", str(tmp_path / "r"), "--no-plots"]) == 2
    err = capsys.readouterr().err.strip()
    assert "results of 1 configuration(s) its sweep.json does not list (topk3: another sweep's)" in err

