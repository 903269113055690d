"""`vrh-lmms tasks-path`: where the plugin's task YAMLs are installed (for lmms-eval's --include_path)."""

from __future__ import annotations

import argparse

from vrh_lmms.base.paths import tasks_path


def configure(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults()


def run(args: argparse.Namespace) -> int:
    print(tasks_path())
    return 0
