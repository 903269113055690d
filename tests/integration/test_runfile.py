"""A run as a file (vrh_lmms.base.runfile): `--config run.yaml` is the run of the flags it stands for, every finished
run writes its run file, and that file reruns the run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from support.tiny_runs import tiny_heads_and_args

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import Geometry
from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file
from vrh_lmms.base.runfile import config_tokens, expand, record
from vrh_lmms.cli import build_parser, main, subparser

PIXELS = 224 * 224
SWEEP_FLAGS = ["--model", "vrh_qwen25", "--tasks", "vrh_synth_grounding", "--heads-file", "h.json", "--k", "1,2",
               "--random-seeds", "2", "--layer-matched", "--control", "image-matched", "--limit", "3",
               "--control-pool", "all", "--pack", "1"]


def _sweep_parser():
    return subparser(build_parser(only="sweep"), "sweep")


def test_a_run_file_stands_for_its_flags_exactly():
    parser = _sweep_parser()
    flagged = parser.parse_args([*SWEEP_FLAGS, "--output", "o"])
    text = yaml.safe_dump(record("sweep", flagged, parser))
    again = parser.parse_args(config_tokens(parser, yaml.safe_load(text)["args"], "test"))
    assert vars(again) == {**vars(flagged), "config": None}
    assert "force" not in yaml.safe_load(text)["args"]  # a decision about a folder, not part of the run


def test_flags_beside_config_override_it_and_env_fills_only_what_is_unset(tmp_path, monkeypatch):
    parser = _sweep_parser()
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"command": "sweep", "args": {"model": "vrh_qwen25", "tasks": "t", "k": "5",
                                                                 "random-seeds": 3, "output": "o"},
                                    "env": {"VRH_REFCOCO_ROOT": "/from/file", "VRH_CACHE_DIR": "/from/file"}}))
    monkeypatch.setenv("VRH_CACHE_DIR", "/mine")
    # set first, so that teardown removes what expand() writes into os.environ (it must not leak into later tests)
    monkeypatch.setenv("VRH_REFCOCO_ROOT", "unset at teardown")
    monkeypatch.delenv("VRH_REFCOCO_ROOT")
    argv = expand(["sweep", "--config", str(path), "--k", "9"], parser)
    args = parser.parse_args(argv[1:])
    assert (args.k, args.random_seeds, args.output) == ("9", 3, "o")
    import os

    assert os.environ["VRH_REFCOCO_ROOT"] == "/from/file" and os.environ["VRH_CACHE_DIR"] == "/mine"


@pytest.mark.parametrize("content,message", [
    ({"args": {"random_sed": 3}}, "unknown option 'random_sed' \\(did you mean 'random_seeds'"),
    ({"command": "steer", "args": {}}, "written for `vrh-lmms steer`, not `vrh-lmms sweep`"),
    ({"args": {"layer_matched": "yes"}}, "option 'layer_matched' takes true or false"),
    ({"args": {}, "env": {"PATH": "/x"}}, "only VRH_\\* data locations"),
    ({"arguments": {}}, "unknown top-level key 'arguments'"),
])
def test_bad_run_files_are_refused_with_one_line_naming_the_bad_part(tmp_path, content, message):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(content))
    with pytest.raises(VRHError, match=message):
        expand(["sweep", "--config", str(path)], _sweep_parser())
    assert main(["sweep", "--config", str(tmp_path / "missing.yaml")]) == 2


def _contents(out: Path) -> dict[str, tuple]:
    contents = {}
    for folder in sorted((out / "configs").iterdir()):
        results = json.loads((folder / "results.json").read_text())
        lines = [{k: v for k, v in json.loads(line).items() if k != "token_counts"}
                 for line in (folder / "samples_vrh_synth_grounding.jsonl").read_text().splitlines()]
        contents[folder.name] = (results["results"], results["vrh"], lines)
    return contents


@pytest.mark.slow
def test_sweep_config_reproduces_the_flag_driven_folder_and_its_run_file_reruns_it(tiny_qwen25, tmp_path, vrh_env):
    vrh_env.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 3, "seed": 4}))
    scores = np.random.default_rng(1).random((2, 4))
    heads = tmp_path / "heads.json"
    save_heads_file(HeadsFile({"id": str(tiny_qwen25), "family": "qwen2_5_vl"}, Geometry(2, 4, 2, 16), scores,
                              ranking_from_scores(scores)), heads)
    model_args = f"pretrained={tiny_qwen25},dtype=float32,min_pixels={PIXELS},max_pixels={PIXELS}"
    flags = ["--model", "vrh_qwen25", "--model_args", model_args, "--tasks", "vrh_synth_grounding", "--heads-file",
             str(heads), "--k", "1", "--random-seeds", "1", "--layer-matched", "--limit", "2", "--gen-kwargs",
             "max_new_tokens=4"]
    assert main(["sweep", *flags, "--output", str(tmp_path / "flags")]) == 0
    written = yaml.safe_load((tmp_path / "flags" / "run.yaml").read_text())
    assert written["command"] == "sweep" and written["args"]["layer_matched"] is True
    assert written["env"]["VRH_SYNTH_CONFIG"] == json.dumps({"n": 3, "seed": 4})
    # a hand-written run file with the same options
    handwritten = tmp_path / "mine.yaml"
    handwritten.write_text(yaml.safe_dump({"args": {
        "model": "vrh_qwen25", "model_args": model_args, "tasks": "vrh_synth_grounding", "heads_file": str(heads),
        "k": [1], "random_seeds": 1, "layer_matched": True, "limit": 2, "gen_kwargs": "max_new_tokens=4",
        "output": str(tmp_path / "config")}}))
    assert main(["sweep", "--config", str(handwritten)]) == 0
    assert _contents(tmp_path / "config") == _contents(tmp_path / "flags")
    # the run file a finished run wrote reruns it: into another folder the same files, into its own a resume
    assert main(["sweep", "--config", str(tmp_path / "flags" / "run.yaml"), "--output", str(tmp_path / "again")]) == 0
    assert _contents(tmp_path / "again") == _contents(tmp_path / "flags")
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "flags" / "configs").rglob("*") if p.is_file()}
    assert main(["sweep", "--config", str(tmp_path / "flags" / "run.yaml")]) == 0
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "flags" / "configs").rglob("*") if p.is_file()} == before


@pytest.mark.slow
def test_locate_writes_its_run_file_and_reruns_from_it(tiny_qwen25, tmp_path, vrh_env):
    """A command that took flags only before (locate): a finished run writes run.yaml into its folder, and the run
    from that file (into another folder) writes the same result."""
    vrh_env.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 3, "seed": 4}))
    heads = tmp_path / "heads.json"
    model_args = tiny_heads_and_args(tiny_qwen25, heads)
    first = tmp_path / "first"
    assert main(["locate", "--model", "vrh_qwen25", "--model_args", model_args, "--tasks", "vrh_synth_grounding",
                 "--heads-file", str(heads), "--limit", "2", "--k", "1,2", "--random-seeds", "1", "--rows", "prompt",
                 "--gen-kwargs", "max_new_tokens=4", "--output", str(first)]) == 0
    written = yaml.safe_load((first / "run.yaml").read_text())
    assert written["command"] == "locate" and written["args"]["k"] == "1,2" and written["args"]["rows"] == "prompt"
    assert written["env"]["VRH_SYNTH_CONFIG"] == json.dumps({"n": 3, "seed": 4})
    assert main(["locate", "--config", str(first / "run.yaml"), "--output", str(tmp_path / "again")]) == 0

    def result(folder: Path) -> dict:
        return {k: v for k, v in json.loads((folder / "locate.json").read_text()).items() if k != "output"}

    assert result(tmp_path / "again") == result(first)
    assert yaml.safe_load((tmp_path / "again" / "run.yaml").read_text())["args"] == {
        **written["args"], "output": str(tmp_path / "again")}
