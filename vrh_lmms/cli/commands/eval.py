"""`vrh-lmms eval ARGS...`: the lmms-eval command line, with our tasks included and the device chosen.

Everything after `eval` is lmms-eval's own arguments. Added for you: the plugin's task folder on the include path
(beside any `--include_path` you pass), `--device cpu` and `device_map=cpu` when there is no GPU, and one clear
error line (exit 2) for bad vrh model args. The exit code is non-zero when no results file was written.
"""

from __future__ import annotations

import argparse

from vrh_lmms.harness.lmms import passthrough


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("lmms_args", nargs=argparse.REMAINDER, help="arguments for lmms-eval (--model ... --tasks ...)")


def run(args: argparse.Namespace) -> int:
    return passthrough(args.lmms_args)
