"""Command-line options that several subcommands share (one definition, one help text)."""

from __future__ import annotations

import argparse

IMAGE_MATCHED_HELP = ("heads outside the top 2k whose attention mass on the image matches each top head's; needs a "
                      "heads file with image_mass")


def add_model_options(parser: argparse.ArgumentParser, model_args_note: str = " (no heads=)") -> None:
    """--model and --model_args: the `vrh_*` backend and its lmms-eval model args."""
    parser.add_argument("--model", required=True, help="a vrh_* model name, e.g. vrh_qwen25")
    parser.add_argument("--model_args", "--model-args", dest="model_args", default="",
                        help=f"lmms-eval model args, e.g. pretrained=Qwen/Qwen2.5-VL-7B-Instruct{model_args_note}")


def add_control_options(parser: argparse.ArgumentParser, what: str, preset: bool = False) -> None:
    """--control image-matched and its --control-tolerance (`what`: the head sets the control adds). With `preset`,
    unset flags stay None so a `--preset` can fill them (vrh_lmms.runs.protocol)."""
    parser.add_argument("--control", action="append", default=None if preset else [],
                        choices=("image-matched", "random-outside"),
                        help=f"{what}: image-matched ({IMAGE_MATCHED_HELP}); random-outside (k heads drawn at random "
                             "outside the top k, the paper's control for its extra models)")
    parser.add_argument("--control-tolerance", type=float, default=None,
                        help="largest image-mass difference of an image-matched head (default 0.05)")
    parser.add_argument("--control-pool", default=None if preset else "live", choices=("live", "all"),
                        help="what control draws are drawn from: live (default; heads whose o_proj columns are all "
                             "zero write nothing and are left out) or all (uniform over all heads, the paper's "
                             "definition; the report then states each draw's dead heads)")


def add_wait_option(parser: argparse.ArgumentParser) -> None:
    """--wait, for every command that writes an output folder or file (its lock: vrh_lmms.base.folder_lock)."""
    parser.add_argument("--wait", action="store_true",
                        help="if another vrh-lmms run holds the output, wait for it to end (default: refuse, naming "
                             "it)")
