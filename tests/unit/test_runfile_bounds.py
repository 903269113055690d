"""Run files are bounded (vrh_lmms.base.runfile): no YAML aliases, scalar or flat-list values, a size cap, UTF-8,
`env:` names the code reads (close names suggested), finite numbers; each refusal is one line before any load."""

from __future__ import annotations

import time

import pytest
import yaml

from vrh_lmms.base import runfile
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.runfile import expand, record
from vrh_lmms.cli import build_parser, main, subparser
from vrh_lmms.harness import lmms

# a "billion laughs": each level names the one below nine times (9**6 = 531,441 strings here; 9**9 in 524 bytes
# took 1.9 GB)
BOMB = "\n".join(["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
                 + [f"{b}: &{b} [*{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}]"
                    for a, b in zip("abcde", "bcdef")]
                 + ["command: sweep", "args:", "  tasks: *f"]) + "\n"


def _parser(command: str = "sweep"):
    return subparser(build_parser(only=command), command)


def _refused(tmp_path, content: str | bytes, match: str, command: str = "sweep") -> str:
    path = tmp_path / "run.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(VRHError, match=match) as err:
        expand([command, "--config", str(path)], _parser(command))
    assert "\n" not in str(err.value)
    return str(err.value)


def test_aliases_are_refused_before_they_expand(tmp_path):
    assert len(BOMB) < 600
    start = time.perf_counter()
    _refused(tmp_path, BOMB, "line 2: YAML alias \\*a; a run file spells every value out")
    assert time.perf_counter() - start < 2


@pytest.mark.parametrize("args, match", [
    ({"model_args": {"pretrained": "x"}}, "option 'model_args' must be a value or a list of values, got dict"),
    ({"k": [[1, 2], 5]}, "option 'k' must be a value or a list of values, got list"),
    ({"limit": float("nan")}, "option 'limit' is nan: not a finite number"),
    ({"k": [1, float("inf")]}, "option 'k' is inf: not a finite number"),
])
def test_values_are_scalars_or_flat_lists_of_finite_numbers(tmp_path, args, match):
    _refused(tmp_path, yaml.safe_dump({"command": "sweep", "args": args}), match)


def test_a_nan_limit_fails_before_any_load(tmp_path, monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the check")

    monkeypatch.setattr(lmms, "build_model", refuse)
    path = tmp_path / "run.yaml"
    path.write_text("command: discover\nargs:\n  model: vrh_qwen25\n  tasks: vrh_synth_grounding\n"
                    f"  output: {tmp_path / 'h.json'}\n  limit: .nan\n")
    assert main(["discover", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("option 'limit' is nan: not a finite number") and len(err.splitlines()) == 1


def test_a_file_beyond_the_size_cap_is_refused_unread(tmp_path):
    text = "command: sweep\nargs:\n  tasks: " + "x" * runfile.MAX_BYTES + "\n"
    _refused(tmp_path, text, f"bytes; a run file holds at most {runfile.MAX_BYTES}")


def test_a_file_that_is_not_utf8_is_one_line(tmp_path, capsys):
    content = b"command: sweep\nargs:\n  tasks: caf\xe9\n"
    _refused(tmp_path, content, "not UTF-8 text \\(byte 33: invalid continuation byte\\)")
    assert main(["sweep", "--config", str(tmp_path / "run.yaml")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize("name, match", [
    ("VRH_REFCOC_ROOT", "env sets 'VRH_REFCOC_ROOT', which vrh-lmms does not read \\(did you mean 'VRH_REFCOCO_ROOT'"),
    ("VRH_SYNTH_CONFG", "did you mean 'VRH_SYNTH_CONFIG'"),
    ("VRH_NOTHING_LIKE_IT_AT_ALL", "which vrh-lmms does not read \\(docs/configuration.md"),
])
def test_env_names_are_the_documented_ones_with_close_names_suggested(tmp_path, name, match):
    _refused(tmp_path, yaml.safe_dump({"args": {}, "env": {name: "/data"}}), match)


@pytest.mark.parametrize("value, match", [({"a": 1}, "env 'VRH_VAW_ROOT' must be a value, got dict"),
                                          (float("nan"), "env 'VRH_VAW_ROOT' is nan")])
def test_env_values_are_finite_scalars(tmp_path, value, match):
    _refused(tmp_path, yaml.safe_dump({"args": {}, "env": {"VRH_VAW_ROOT": value}}), match)


def test_every_documented_name_is_accepted_and_a_run_file_records_only_those(tmp_path, vrh_env):
    names = ["VRH_MMSTAR_HUB", "VRH_SYNTH_REFER_ROOT", "VRH_BOX_CONVENTION", "VRH_CACHE_DIR", "VRH_VHS_SEED"]
    for name in names:  # set then unset, so that teardown removes what expand() writes into os.environ
        vrh_env.setenv(name, "unset at teardown")
        vrh_env.delenv(name)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"args": {}, "env": {n: "1" for n in names}}))
    expand(["sweep", "--config", str(path)], _parser())
    vrh_env.setenv("VRH_REFCOC_ROOT", "/typo")  # set in the shell, read by nothing: a rerun would refuse it
    parser = _parser()
    recorded = record("sweep", parser.parse_args(["--model", "m", "--tasks", "t", "--output", "o", "--k", "1"]),
                      parser)["env"]
    assert "VRH_REFCOC_ROOT" not in recorded and {"VRH_MMSTAR_HUB", "VRH_VHS_SEED"} <= set(recorded)
