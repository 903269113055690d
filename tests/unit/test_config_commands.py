"""`--config run.yaml` for every command that runs a model, from one place: the command table's `run_file` field and
the one run-file reader and writer (vrh_lmms.base.runfile), checked here on every such command's own parser with a
value for each of its options (no model loads)."""

from __future__ import annotations

import argparse
import os

import pytest
import yaml

from vrh_lmms import cli
from vrh_lmms.base import runfile
from vrh_lmms.base.errors import VRHError
from vrh_lmms.cli import BY_NAME, CONFIG_COMMANDS, TABLE, build_parser, main, subparser

# Commands that run a model but keep no run file of ours, and why.
NO_RUN_FILE = {"eval": "its arguments are lmms-eval's own, with lmms-eval's own --config YAML"}
SKIPPED = {"help", "config", "force", "wait"}  # not part of a run (runfile._NOT_RECORDED) or argparse's own


def test_every_command_that_runs_a_model_takes_a_run_file():
    """A command that chooses torch threads or runs on ranks loads a model: it takes --config (or is listed above)."""
    runs_a_model = {c.name for c in TABLE if c.sets_threads or c.ranks}
    assert runs_a_model - set(CONFIG_COMMANDS) == set(NO_RUN_FILE)
    assert set(CONFIG_COMMANDS) >= {"demo", "discover", "sweep", "steer", "patch", "replicate", "attention-maps",
                                    "locate", "rank", "kv-cache", "export-masked", "dpo-train", "rank-train"}
    for name in CONFIG_COMMANDS:
        assert BY_NAME[name].run_file in ("folder", "beside") and BY_NAME[name].output
        assert "--config" in subparser(build_parser(only=name), name)._option_string_actions


def _parser(name: str) -> argparse.ArgumentParser:
    return subparser(build_parser(only=name), name)


def _value(action: argparse.Action) -> str | None:
    """A value for an option that differs from its default (None: a switch, given by its flag alone)."""
    if action.nargs == 0:
        return None
    if action.choices:
        return next(str(c) for c in reversed(list(action.choices)) if c != action.default)
    if action.type is int:
        return str(7 if action.default != 7 else 8)
    if action.type is float:
        return "0.25" if action.default != 0.25 else "0.5"
    return f"v-{action.dest}"


def _flags(parser: argparse.ArgumentParser, skip_positional: bool = False) -> list[str]:
    """Every option of the command given once, with a value other than its default; positionals first."""
    positional, options = [], []
    for action in parser._actions:
        if action.dest in SKIPPED:
            continue
        if not action.option_strings:
            if not skip_positional:
                positional.append(f"p-{action.dest}")
            continue
        value = _value(action)
        options += [action.option_strings[0], *([] if value is None else [value])]
    return positional + options


@pytest.mark.parametrize("name", CONFIG_COMMANDS)
def test_a_run_file_stands_for_its_flags_and_reloads_to_the_same_args(name, tmp_path, monkeypatch):
    for key in [k for k in os.environ if k.startswith("VRH_")]:
        monkeypatch.delenv(key)
    # the run file records the VRH_* variables set, but the per-user and per-machine ones
    monkeypatch.setenv("VRH_SYNTH_CONFIG", '{"n": 3}')
    monkeypatch.setenv("VRH_HEADS_REGISTRY", str(tmp_path / "registry.json"))
    monkeypatch.setenv("VRH_THREADS", "1")
    parser = _parser(name)
    flagged = parser.parse_args(_flags(parser))
    # a run file written by hand with the same options (dashes or underscores) parses to the same args
    by_hand = {a.dest.replace("_", "-"): getattr(flagged, a.dest) for a in parser._actions
               if a.dest not in SKIPPED}
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"command": name, "args": by_hand}))
    from_file = parser.parse_args(runfile.expand([name, "--config", str(path)], parser)[1:])
    assert vars(from_file) == {**vars(flagged), "config": None}
    # the run file a finished run writes reloads to the same args
    written = runfile.write(name, flagged, parser, tmp_path / "run.yaml")
    assert runfile.is_ours(written) and yaml.safe_load(written.read_text())["command"] == name
    assert yaml.safe_load(written.read_text())["env"] == {"VRH_SYNTH_CONFIG": '{"n": 3}'}
    again = parser.parse_args(runfile.expand([name, "--config", str(written)], parser)[1:])
    assert vars(again) == {**vars(flagged), "config": None}


@pytest.mark.parametrize("name", CONFIG_COMMANDS)
def test_flags_beside_config_override_it(name, tmp_path):
    parser = _parser(name)
    dest = BY_NAME[name].output
    flag = next(a.option_strings[0] for a in parser._actions if a.dest == dest)
    written = runfile.write(name, parser.parse_args(_flags(parser)), parser, tmp_path / "run.yaml")
    argv = runfile.expand([name, "--config", str(written), flag, "elsewhere"], parser)
    args = parser.parse_args(argv[1:])
    assert getattr(args, dest) == "elsewhere"
    positionals = [a.dest for a in parser._actions if not a.option_strings]
    if positionals:  # dpo-train's PAIRS: given on the command line it replaces the file's
        argv = runfile.expand([name, "other.jsonl", "--config", str(written)], parser)
        assert getattr(parser.parse_args(argv[1:]), positionals[0]) == "other.jsonl"


@pytest.mark.parametrize("name", CONFIG_COMMANDS)
def test_an_unknown_key_is_refused_in_one_line_naming_it(name, tmp_path, capsys, monkeypatch):
    parser = _parser(name)
    known = next(a.dest for a in parser._actions if a.option_strings and a.dest not in SKIPPED)
    typo = known[:-1] + "q" if len(known) > 3 else known + "_x"
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"command": name, "args": {typo: 1}}))
    with pytest.raises(VRHError, match=f"unknown option '{typo}' \\(did you mean [^)]*'{known}'"):
        runfile.expand([name, "--config", str(path)], parser)
    started = []
    monkeypatch.setattr(cli, "_locked", lambda *a: started.append(a))  # where every run starts
    assert main([name, "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"unknown option '{typo}'" in err
    assert started == []  # refused before the run (and its model) started


def test_run_files_of_earlier_versions_keep_loading(tmp_path):
    """What earlier versions wrote: discovery's file beside the heads file, a sweep's `exclude_discovery_docs: on`
    (the value the switch stores), options spelt with dashes."""
    sweep = _parser("sweep")
    path = tmp_path / "run.yaml"
    path.write_text(runfile.HEADER + ": rerun with `vrh-lmms sweep --config run.yaml`\n" + yaml.safe_dump({
        "command": "sweep", "args": {"model": "vrh_qwen25", "tasks": "t", "heads_file": "h.json", "k": "1,5",
                                     "random-seeds": 3, "exclude_discovery_docs": "on", "layer_matched": True,
                                     "output": "o"}}))
    args = sweep.parse_args(runfile.expand(["sweep", "--config", str(path)], sweep)[1:])
    assert (args.exclude_discovery_docs, args.random_seeds, args.layer_matched) == ("on", 3, True)
    assert runfile.run_file_path("runs/heads.json", beside=True).as_posix() == "runs/heads.run.yaml"
    assert runfile.run_file_path("runs/sweep").as_posix() == "runs/sweep/run.yaml"


def test_the_run_file_belongs_to_the_outputs_it_is_written_into(tmp_path):
    """A rerun with --force replaces a finished run's folder: its run file counts as ours there, a user's does not."""
    from vrh_lmms.base import owned
    from vrh_lmms.pipelines.demo.pipeline import demo_layout
    from vrh_lmms.pipelines.replicate.run import LAYOUT as REPLICATE
    from vrh_lmms.runs.kvcache.run import LAYOUT as KV_CACHE

    checkpoint = tmp_path / "checkpoint"  # export-masked, dpo-train, rank-train, train-tiny: a listed checkpoint
    checkpoint.mkdir()
    (checkpoint / "model.safetensors").write_bytes(b"0")
    owned.write_listing(checkpoint)
    parser = argparse.ArgumentParser()
    parser.add_argument("--output")
    for folder, layout in ((checkpoint, owned.listing_layout(checkpoint)), (tmp_path / "kv", KV_CACHE),
                           (tmp_path / "replicate", REPLICATE), (tmp_path / "demo", demo_layout(tmp_path / "demo"))):
        folder.mkdir(exist_ok=True)
        runfile.write("x", argparse.Namespace(output=str(folder)), parser, folder / runfile.RUN_FILE)
        assert owned.foreign_entries(folder, layout) == [], folder
        (folder / runfile.RUN_FILE).write_text("args: {}\n")  # a user's own
        assert owned.foreign_entries(folder, layout) == [folder / runfile.RUN_FILE], folder
