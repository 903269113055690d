"""The commands that write one result (attention-maps, locate, rank, kv-cache) as one-unit jobs of the runner
(vrh_lmms.runs.runner.result_job), on a tiny random-weight Qwen2.5-VL: the same arguments into a finished folder load
no model, other arguments are refused in one line naming the field, and a run that fails before its result leaves
no result file (the next run with the same arguments redoes it, loading the model once)."""

from __future__ import annotations

import importlib
import json

import pytest
from support.tiny_runs import tiny_heads_and_args

from vrh_lmms.cli import main
from vrh_lmms.harness import lmms

SYNTH = ["--tasks", "vrh_synth_grounding", "--gen-kwargs", "max_new_tokens=4"]
# command -> (its flags, its result file, a flag changed for the second run, the identity field it changes,
# the module attribute a failing unit raises in, just before the result is written)
COMMANDS = {
    "attention-maps": (["--docs", "0", "--k", "2", *SYNTH], "attention_maps.json", ["--k", "3"], "k",
                       "vrh_lmms.runs.maps.figure.maps_figure"),
    "locate": (["--limit", "2", "--k", "1,2", "--random-seeds", "1", *SYNTH], "locate.json", ["--seed", "1"], "seed",
               "vrh_lmms.runs.maps.evaluate.evaluate_sets"),
    "rank": (["--data", "synth", "--limit", "2", "--candidates", "2", "--k", "1", "--random-seeds", "1"], "rank.json",
             ["--limit", "3"], "limit", "vrh_lmms.runs.rank.outputs.markdown"),
    "kv-cache": (["--limit", "2", "--budgets", "1,0.5", "--random-seeds", "1", *SYNTH], "kv_cache.json",
                 ["--budgets", "1,0.25"], "budgets", "vrh_lmms.runs.kvcache.outputs.markdown"),
}


@pytest.fixture
def builds(monkeypatch):
    """Every model load, counted."""
    loads: list[str] = []
    real = lmms.build_model

    def counted(*args, **kwargs):
        loads.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(lmms, "build_model", counted)
    return loads


@pytest.mark.slow
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_one_result_command_on_the_runner(command, tiny_qwen25, tmp_path, vrh_env, builds, capsys):
    vrh_env.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 3, "seed": 4}))
    flags, result, other, field, failing = COMMANDS[command]
    heads = tmp_path / "heads.json"
    model_args = tiny_heads_and_args(tiny_qwen25, heads)
    out = tmp_path / "out"
    args = [command, "--model", "vrh_qwen25", "--model_args", model_args, "--heads-file", str(heads), *flags,
            "--output", str(out)]

    # a unit that fails before its result: no result file, nothing that reads as complete
    module, name = failing.rsplit(".", 1)

    def fail(*a, **k):
        raise RuntimeError("the run stops here")

    with vrh_env.context() as patch:
        patch.setattr(importlib.import_module(module), name, fail)
        try:
            code = main(args)
        except RuntimeError:
            code = None
    assert code != 0 and builds == ["vrh_qwen25"]
    assert not (out / result).exists() and (out / "identity.json").is_file()

    # the same arguments again: redone whole, the model loaded once
    assert main(args) == 0 and builds == ["vrh_qwen25"] * 2
    identity = json.loads((out / "identity.json").read_text())
    assert identity["command"] == command and identity["heads_sha256"]
    written = {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name != "vrh-lmms.log"}
    capsys.readouterr()

    # and once more: already complete, no model load, nothing rewritten but the run file
    assert main(args) == 0 and builds == ["vrh_qwen25"] * 2
    assert "already holds this" in " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert {n: t for n, t in written.items() if n != "run.yaml"} == {
        p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name not in ("vrh-lmms.log", "run.yaml")}

    # other arguments: refused in one line naming the field, before any model load
    assert main([*args, *other]) != 0 and builds == ["vrh_qwen25"] * 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"({field} differ)" in err and "--force" in err, err
    # with --force they replace it
    assert main([*args, *other, "--force"]) == 0 and builds == ["vrh_qwen25"] * 3
    assert json.loads((out / "identity.json").read_text())[field] != identity[field]


@pytest.mark.slow
def test_an_earlier_versions_kv_cache_folder_is_refused_then_replaced_with_force(tiny_qwen25, tmp_path, vrh_env,
                                                                                  builds, capsys):
    """A folder left before the runner (a result and its files, no identity.json) keeps working: refused without
    --force, before any model load, and replaced with it."""
    vrh_env.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 3, "seed": 4}))
    heads = tmp_path / "heads.json"
    model_args = tiny_heads_and_args(tiny_qwen25, heads)
    out = tmp_path / "out"
    (out / "runs" / "earlier_policy").mkdir(parents=True)
    (out / "runs" / "earlier_policy" / "results.json").write_text("{}")
    (out / "kv_cache.json").write_text(json.dumps({"schema": "vrh-kv-cache/1", "rows": []}))
    (out / "kv_cache.md").write_text("# KV cache\n")
    flags, *_ = COMMANDS["kv-cache"]
    args = ["kv-cache", "--model", "vrh_qwen25", "--model_args", model_args, "--heads-file", str(heads), *flags,
            "--output", str(out)]
    assert main(args) != 0 and builds == []
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "(no identity.json: an earlier version's)" in err and "--force" in err, err
    assert main([*args, "--force"]) == 0 and builds == ["vrh_qwen25"]
    assert json.loads((out / "kv_cache.json").read_text())["rows"] and not (out / "runs" / "earlier_policy").exists()
