"""A run as a file: `vrh-lmms sweep --config run.yaml` (and every other command that runs a model: the commands whose
record in `vrh_lmms.cli.TABLE` names a `run_file`), and the same file written into every finished run's output, so a
run can be reviewed and rerun from its folder.

    command: sweep
    args:                       # the command's options by name (`random_seeds` or `random-seeds`)
      model: vrh_qwen25
      model_args: pretrained=Qwen/Qwen2.5-VL-7B-Instruct
      tasks: vrh_refcoco_testA
      heads_file: heads/qwen25.json
      k: 1,5,10,20
      random_seeds: 19
      control: [image-matched]
      output: sweeps/qwen25
    env:                        # data locations (VRH_* variables); a variable already set in the environment wins
      VRH_REFCOCO_ROOT: /data/refcoco

The file is turned into the command-line tokens it stands for and parsed by the command's own parser, so a run from a
file is the run from those flags, nothing else; flags given beside `--config` come after the file's and override
them (a positional argument given on the command line replaces the file's). What a finished run writes (`run.yaml`
in its output folder, `<heads>.run.yaml` beside a heads file) holds every option as the run used it (not `--force`,
which is a decision about a folder, not part of a run) and the VRH_* variables that were set.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from vrh_lmms.base import atomic
from vrh_lmms.base.data_env import DATA_VARIABLES, SETTING_VARIABLES, benchmark_variables
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.tables import did_you_mean

RUN_FILE = "run.yaml"
_NOT_RECORDED = {"command", "config", "force", "wait"}
# Per-user and per-machine settings: read from the environment, never recorded in a run file (a rerun elsewhere keeps
# that account's registry and that machine's threads); docs/configuration.md lists every VRH_* variable.
UNRECORDED_ENV = ("VRH_HEADS_REGISTRY", "VRH_HUB_PROBE_TIMEOUT", "VRH_LMMS_CLI", "VRH_SWEEP_CACHE", "VRH_THREADS")
HEADER = "# vrh-lmms run file"  # the first line of every run file vrh-lmms writes (`write`), in every version
# A run file holds a few dozen options: anything far larger is not one (and is refused before it is parsed).
MAX_BYTES = 256 * 1024
_SCALARS = (str, int, float, bool, type(None))


def known_variables() -> set[str]:
    """The `VRH_*` variables the code reads (docs/configuration.md's table, kept equal by
    tests/unit/test_configuration_docs.py): what a run file's `env:` may set."""
    return set(DATA_VARIABLES) | set(SETTING_VARIABLES) | set(UNRECORDED_ENV) | set(benchmark_variables())


def run_file_path(output: str | Path, beside: bool = False) -> Path:
    """Where a finished run with this output keeps its run file: `run.yaml` in the output folder, or with `beside`
    (an output that is one file, such as discovery's heads file) `<output without .json>.run.yaml` next to it."""
    out = Path(output)
    if beside:
        stem = out.with_suffix("") if out.suffix == ".json" else out
        return Path(f"{stem}.{RUN_FILE}")
    return out / RUN_FILE


def is_ours(path: str | Path) -> bool:
    """A run file vrh-lmms wrote, recognised by its first line."""
    path = Path(path)
    if not path.is_file() or path.is_symlink():
        return False
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.readline().startswith(HEADER)


def check_target(path: Path, force: bool) -> None:
    """Before a run starts: its run file would replace `path`, so refuse when that is a file a user wrote (without
    `force`)."""
    if (path.exists() or path.is_symlink()) and not is_ours(path) and not force:
        raise VRHError(f"{path} was not written by vrh-lmms (its first line is not {HEADER!r}) and a finished run "
                       f"would replace it; move it away, choose another --output, or pass --force")


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The command's options and positional arguments by name (what a run file's `args` may hold)."""
    return {a.dest: a for a in parser._actions if not isinstance(a, argparse._HelpAction)}


def _text(path: Path) -> str:
    """The file's text: at most MAX_BYTES, UTF-8, and YAML without aliases (an alias repeats what its anchor holds,
    so a few hundred bytes of nested aliases expand to gigabytes); each refusal is one line."""
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise VRHError(f"--config {path}: {size} bytes; a run file holds at most {MAX_BYTES} (is it a run file?)")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise VRHError(f"--config {path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                mark = event.start_mark
                raise VRHError(f"--config {path}: line {mark.line + 1}: YAML alias *{event.anchor}; a run file "
                               f"spells every value out")
    except yaml.YAMLError as exc:
        raise VRHError(f"--config {path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    return text


def _check_value(value: Any, where: str, flat_list: bool) -> None:
    """A scalar (or, where `flat_list`, a list of scalars), every number finite."""
    items = value if flat_list and isinstance(value, list) else [value]
    for item in items:
        if not isinstance(item, _SCALARS):
            shape = "a value or a list of values" if flat_list else "a value"
            raise VRHError(f"{where} must be {shape}, got {type(item).__name__}")
        if isinstance(item, float) and not math.isfinite(item):
            raise VRHError(f"{where} is {item}: not a finite number")


def load(path: str | Path, command: str) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise VRHError(f"--config {path}: no such file")
    text = _text(path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise VRHError(f"--config {path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise VRHError(f"--config {path}: expected a mapping with 'args' (and optionally 'command', 'env')")
    unknown = set(data) - {"command", "args", "env"}
    if unknown:
        raise VRHError(f"--config {path}: unknown top-level key {sorted(unknown, key=str)[0]!r} (use command, args, "
                       f"env)")
    if data.get("command") not in (None, command):
        raise VRHError(f"--config {path}: written for `vrh-lmms {data['command']}`, not `vrh-lmms {command}`")
    for key in ("args", "env"):
        if not isinstance(data.get(key) or {}, dict):
            raise VRHError(f"--config {path}: '{key}' must be a mapping")
    for name, value in (data.get("args") or {}).items():
        _check_value(value, f"--config {path}: option {name!r}", flat_list=True)
    known = known_variables()
    for name, value in (data.get("env") or {}).items():
        if not str(name).startswith("VRH_"):
            raise VRHError(f"--config {path}: env sets {name!r}; only VRH_* data locations belong there")
        if name not in known:
            raise VRHError(f"--config {path}: env sets {name!r}, which vrh-lmms does not read"
                           f"{did_you_mean(str(name), known)} (docs/configuration.md lists the variables)")
        _check_value(value, f"--config {path}: env {name!r}", flat_list=False)
    return data


def config_tokens(parser: argparse.ArgumentParser, args: dict[str, Any], where: str,
                  skip: Sequence[str] = ()) -> list[str]:
    """The command-line tokens a file's `args` stand for, checked against the command's own options; positional
    arguments come first, those named in `skip` (given on the command line instead) left out."""
    actions = _actions(parser)
    positional: list[str] = []
    tokens: list[str] = []
    for raw_key, value in args.items():
        key = str(raw_key).lstrip("-").replace("-", "_")
        action = actions.get(key)
        if action is None or key in _NOT_RECORDED:
            known = [k for k in actions if k not in _NOT_RECORDED]
            raise VRHError(f"{where}: unknown option {raw_key!r}{did_you_mean(key, known)}")
        if not action.option_strings:
            if key not in skip and value is not None:
                positional += [str(v) for v in (value if isinstance(value, list) else [value])]
            continue
        flag = action.option_strings[-1]
        if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
            if not isinstance(value, bool):
                raise VRHError(f"{where}: option {raw_key!r} takes true or false, got {value!r}")
            if value == isinstance(action, argparse._StoreTrueAction):
                tokens.append(flag)
        elif value is None:
            continue
        elif isinstance(action, argparse._StoreConstAction):  # a switch that stores a word: the word, or true
            if value is True or value == action.const:
                tokens.append(flag)
            elif value is not False:
                raise VRHError(f"{where}: option {raw_key!r} takes true, false or {action.const!r}, got {value!r}")
        elif isinstance(action, argparse._AppendAction):
            for item in value if isinstance(value, list) else [value]:
                tokens += [flag, str(item)]
        elif action.nargs in ("+", "*") or isinstance(action.nargs, int):
            tokens += [flag, *(str(v) for v in (value if isinstance(value, list) else [value]))]
        else:
            text = ",".join(str(v) for v in value) if isinstance(value, list) else str(value)
            tokens += [flag, text]
    return positional + tokens


@contextmanager
def _nothing_required(parser: argparse.ArgumentParser) -> Iterator[None]:
    """The parser with every option and positional argument optional (and absent positionals unset), for a look at
    what a partial command line gives; restored after."""
    saved = [(a, a.required, a.nargs, a.default) for a in parser._actions]
    for action in parser._actions:
        action.required = False
        if not action.option_strings and not isinstance(action, argparse._HelpAction):
            action.nargs = "?" if action.nargs in (None, "?") else "*"
            action.default = argparse.SUPPRESS
    try:
        yield
    finally:
        for action, required, nargs, default in saved:
            action.required, action.nargs, action.default = required, nargs, default


def given_positionals(parser: argparse.ArgumentParser, tokens: Sequence[str]) -> set[str]:
    """The positional arguments (by name) that these command-line tokens give: they replace a run file's."""
    if all(a.option_strings for a in parser._actions):
        return set()
    with _nothing_required(parser):
        given, _ = parser.parse_known_args(list(tokens))
    return {a.dest for a in parser._actions if not a.option_strings and hasattr(given, a.dest)}


def expand(argv: Sequence[str], parser: argparse.ArgumentParser) -> list[str]:
    """`[command, ..., --config FILE, ...]` -> `[command, <the file's tokens>, ...the rest]`; the file's `env` is set
    where the environment has no value of its own. Without `--config` the argv is returned as it is."""
    argv = list(argv)
    command = argv[0]
    positions = [i for i, a in enumerate(argv) if a == "--config" or a.startswith("--config=")]
    if not positions:
        return argv
    if len(positions) > 1:
        raise VRHError("--config given more than once")
    i = positions[0]
    if argv[i] == "--config":
        if i + 1 >= len(argv):
            raise VRHError("--config needs a file (run.yaml)")
        path, rest = argv[i + 1], argv[:i] + argv[i + 2:]
    else:
        path, rest = argv[i].split("=", 1)[1], argv[:i] + argv[i + 1:]
    data = load(path, command)
    tokens = config_tokens(parser, data.get("args") or {}, f"--config {path}", given_positionals(parser, rest[1:]))
    for key, value in (data.get("env") or {}).items():  # set once the whole file is known to be good
        os.environ.setdefault(str(key), str(value))
    return [command, *tokens, *rest[1:]]


def record(command: str, args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """The run file of a parsed invocation: every option as the run used it, and the VRH_* variables set (but the
    per-user and per-machine ones, UNRECORDED_ENV)."""
    values = {}
    for key, action in _actions(parser).items():
        if key in _NOT_RECORDED or not hasattr(args, key):
            continue
        value = getattr(args, key)
        if isinstance(value, tuple):
            value = list(value)
        if value is None or value == [] or (isinstance(action, argparse._StoreTrueAction) and value is False):
            continue
        values[key] = value
    known = known_variables()  # a variable no code reads (a typo) would make the file refuse to rerun
    env = {k: v for k, v in sorted(os.environ.items()) if k in known and k not in UNRECORDED_ENV}
    return {"command": command, "args": values, **({"env": env} if env else {})}


def write(command: str, args: argparse.Namespace, parser: argparse.ArgumentParser, path: Path) -> Path:
    """Write the run file of a finished run to `path` (`run_file_path` of its output)."""
    text = HEADER + ": rerun with `vrh-lmms " + command + " --config " + path.name + "`\n"
    text += yaml.safe_dump(record(command, args, parser), sort_keys=False, default_flow_style=False)
    return atomic.write_text(path, text)
