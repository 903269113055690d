"""`vrh-lmms --help` and every subcommand's `--help`: a user's first line, and each option's default shown."""

from __future__ import annotations

import argparse
import re

import pytest

from vrh_lmms import cli
from vrh_lmms.cli.help_format import default_text


def _options_with_defaults(parser: argparse.ArgumentParser):
    """Options that take a value and have one when left out (on/off flags are off unless given: not listed)."""
    for action in parser._actions:
        if (action.option_strings and action.nargs != 0 and action.default is not None
                and action.default is not argparse.SUPPRESS):
            yield action


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    return cli.build_parser()


def test_every_option_with_a_default_shows_it(parser):
    missing, seen = [], 0
    for name in cli.COMMANDS:
        sub = cli.subparser(parser, name)
        formatter = sub._get_formatter()
        for action in _options_with_defaults(sub):
            seen += 1
            shown = formatter._expand_help(action)  # the help text exactly as --help prints it
            if default_text(action.default).replace("%%", "%") not in shown:
                missing.append(f"{name} {action.option_strings[0]}: {shown!r}")
    assert seen > 100  # the walk reached the subcommands' options
    assert not missing, "\n".join(missing)


def test_demo_help_shows_its_sizes(parser, capsys):
    with pytest.raises(SystemExit):
        parser.parse_args(["demo", "--help"])
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    from vrh_lmms.pipelines.demo.stages import DemoSettings

    d = DemoSettings()
    for option, value in (("--n-discovery", d.n_discovery), ("--n-eval", d.n_eval),
                          ("--random-seeds", d.random_seeds)):
        assert re.search(rf"{option} \S+ [^()]*\(default: {value}\)", text), option


def test_top_level_help_opens_with_a_users_line(parser):
    first = parser.format_help().split("\n\n")[1]
    assert "vrh-lmms demo" in first and "retrieval heads" in first
    assert '`vrh-lmms` command line' not in first and "imported only when used" not in first



def test_no_recall_time_in_help_matches_readme():
    """The recall step's cost is stated once in words: --help and the README give the same figure."""
    from pathlib import Path

    help_text = " ".join(a.help for a in cli.subparser(cli.build_parser("demo"), "demo")._actions
                         if "--no-recall" in a.option_strings)
    readme = Path(__file__).resolve().parents[2].joinpath("README.md").read_text()
    said = re.search(r"about (\d+ s|a minute|\d+ min\w*)", help_text)
    assert said, help_text
    near = [m.group(0) for m in re.finditer(r"--no-recall[^\n]*(?:\n[^\n]+){0,2}", readme)]
    assert near and all(said.group(0) in re.sub(r"\s+", " ", n) for n in near if "about" in n), near


MODULE_PATH = re.compile(r"\b(vrh_lmms|lmms_eval|model_wrappers)(\.[A-Za-z_]\w*)+")


def help_problems(parser: argparse.ArgumentParser, name: str) -> list[str]:
    """What a user would stumble on in one command's --help: an option with no help text, a help naming a module
    path (internal code, not something to type), a value option whose default is not said (neither shown by the
    formatter nor written in its text: 'default: none, ...'), or a default shown as nothing (`(default: )`)."""
    out = []
    formatter = parser._get_formatter()
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
            continue
        option = f"{name} {action.option_strings[0]}"
        shown = formatter._expand_help(action) if action.help else ""
        if not shown.strip():
            out.append(f"{option}: no help")
        if MODULE_PATH.search(shown):
            out.append(f"{option}: names {MODULE_PATH.search(shown).group(0)}")
        if action.nargs != 0 and not action.required and "default" not in shown.lower():
            out.append(f"{option}: its default is not said: {shown!r}")
        if re.search(r"default: ?(None\b|\)|$)", shown):
            out.append(f"{option}: an empty default: {shown!r}")
    return out


def test_every_option_has_help_and_a_default_and_no_module_path(parser):
    """Walks every command's parser (the shared options, --config and --wait included)."""
    problems = [p for name in cli.COMMANDS for p in help_problems(cli.subparser(parser, name), name)]
    assert not problems, "\n".join(problems)


def test_the_help_walk_sees_each_kind_of_problem():
    """The control: a parser with one option of each fault, and one good option, is read as such."""
    from vrh_lmms.cli.help_format import DefaultsHelpFormatter

    p = argparse.ArgumentParser(formatter_class=DefaultsHelpFormatter)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--preset", default=None, help="the protocol (vrh_lmms.runs.protocol)")
    p.add_argument("--limit", default=None, help="docs per task")
    p.add_argument("--good", default=None, help="docs per task (default: all)")
    p.add_argument("--flag", action="store_true", help="an on/off flag")
    assert help_problems(p, "x") == [
        "x --seed: no help", "x --seed: its default is not said: ''", "x --preset: names vrh_lmms.runs.protocol",
        "x --preset: its default is not said: 'the protocol (vrh_lmms.runs.protocol)'",
        "x --limit: its default is not said: 'docs per task'"]
    p.add_argument("--model_args", default="", help="model args")
    assert not [x for x in help_problems(p, "x") if "model_args" in x]  # an empty default shows as `(default: none)`


def _sections(sub: argparse.ArgumentParser) -> dict[str, list[str]]:
    """--help's headings with the options under each, as printed."""
    text = sub.format_help()
    out: dict[str, list[str]] = {}
    for block in text.split("\n\n"):
        head, _, body = block.partition(":\n")
        if body and not head.startswith(("usage", " ")) and "\n" not in head:
            out[head] = re.findall(r"^  (--?[\w-]+)", body, flags=re.M)
    return out


def test_long_commands_show_their_options_under_headings(parser):
    """A command with 15 options or more lists them under headings (argparse argument groups), every option once;
    a short one keeps one list; parsing is unchanged."""
    from vrh_lmms.cli.help_format import LONG_HELP, SECTIONS

    titles = [t for t, _ in SECTIONS]
    long_ones = []
    for name in cli.COMMANDS:
        sub = cli.subparser(parser, name)
        options = [a.option_strings[0] for a in sub._actions if a.option_strings and a.help != argparse.SUPPRESS]
        sections = _sections(sub)
        shown = [o for opts in sections.values() for o in opts]
        assert sorted(shown) == sorted(options), name  # each option under exactly one heading
        if len([a for a in sub._actions if a.option_strings]) - 1 >= LONG_HELP:  # hidden ones counted, -h not
            long_ones.append(name)
            assert set(sections) - {"options", "positional arguments"} <= set(titles) and len(sections) >= 4, \
                (name, list(sections))
            assert sections["options"] == ["-h"], name
            assert "--output" not in sections.get(titles[0], []) and "--model" not in sections.get(titles[0], [])
        else:
            assert set(sections) <= {"positional arguments", "options"}, name
    assert {"demo", "discover", "sweep", "replicate", "report"} <= set(long_ones)
    args = parser.parse_args(["sweep", "--model", "vrh_qwen25", "--tasks", "t", "--output", "o", "--k", "1,2",
                              "--no-random", "--seed", "3"])
    assert (args.k, args.no_random, args.seed, args.output, args.model_args) == ("1,2", True, 3, "o", "")
