"""`vrh-lmms --help` opens with what the tool does for a user and lists every command once, under its heading."""

from __future__ import annotations

import re

import pytest

from vrh_lmms.cli import GROUPS, TABLE, build_parser, subparser


@pytest.fixture(scope="module")
def parser():
    return build_parser()  # every command configured (imports each command's module once)


def test_help_opens_for_a_user_and_groups_every_command(parser):
    text = parser.format_help()
    lines = text.splitlines()
    assert lines[0].startswith("usage: vrh-lmms")
    assert lines[2].startswith("Find the retrieval heads of a vision-language model")
    assert "vrh-lmms demo" in lines[3]
    headings = [line.strip() for line in lines if line.startswith("  ") and not line.startswith("   ")
                and line.strip() in GROUPS]
    assert headings == list(GROUPS)
    listed = re.findall(r"^    (\S+)\s{2,}\S", text, flags=re.M)
    assert sorted(listed) == sorted(c.name for c in TABLE) and len(listed) == len(set(listed))
    # each command sits under its own heading
    for command in TABLE:
        block = text.split(f"\n  {command.group}\n", 1)[1].split("\n\n", 1)[0]
        assert f"    {command.name} " in block, (command.name, command.group)


def test_every_command_module_configures_a_parser(parser):
    for command in TABLE:
        assert subparser(parser, command.name).format_usage().startswith(f"usage: vrh-lmms {command.name}")
