"""Command-line options that several subcommands share (one definition, one help text)."""

from __future__ import annotations

import argparse

from vrh_lmms.base.heads.kinds import DEFAULT_POOL, OPTIONS, POOLS


def add_model_options(parser: argparse.ArgumentParser, model_args_note: str = " (no heads=)") -> None:
    """--model and --model_args: the `vrh_*` backend and its lmms-eval model args."""
    parser.add_argument("--model", required=True, help="a vrh_* model name, e.g. vrh_qwen25")
    parser.add_argument("--model_args", "--model-args", dest="model_args", default="",
                        help=f"lmms-eval model args, e.g. pretrained=Qwen/Qwen2.5-VL-7B-Instruct{model_args_note}")


def add_draw_options(parser: argparse.ArgumentParser, *, matched_by_default: bool = False,
                     random_flag: bool = True) -> None:
    """The control draws a sweep, a steering or a patching run plans per k and seed beside --control's
    (vrh_lmms.base.heads.plan): --layer-matched (or, where layer-matched draws are planned by default,
    --no-layer-matched) and --no-random; `plan_flags` hands them to the plan."""
    if matched_by_default:
        parser.add_argument("--no-layer-matched", action="store_true", help="skip layer-matched random head sets")
    else:
        parser.add_argument("--layer-matched", action="store_true", help="also layer-matched random-k controls")
    if random_flag:
        parser.add_argument("--no-random", action="store_true", help="skip uniform random-k controls")


def plan_flags(args: argparse.Namespace) -> dict[str, bool]:
    """`plan_configurations`' flags as `add_draw_options` set them."""
    matched = not args.no_layer_matched if hasattr(args, "no_layer_matched") else args.layer_matched
    return {"layer_matched": matched, "random": not getattr(args, "no_random", False)}


def add_control_options(parser: argparse.ArgumentParser, what: str, preset: bool = False) -> None:
    """--control image-matched and its --control-tolerance (`what`: the head sets the control adds). With `preset`,
    unset flags stay None so a `--preset` can fill them (vrh_lmms.runs.protocol)."""
    parser.add_argument("--control", action="append", default=None if preset else [], choices=tuple(OPTIONS),
                        help=f"{what}: " + "; ".join(f"{name} ({kind.option_help})" for name, kind in OPTIONS.items())
                        + " (default: none)")
    parser.add_argument("--control-tolerance", type=float, default=None,
                        help="largest image-mass difference of an image-matched head (default 0.05)")
    parser.add_argument("--control-pool", default=None if preset else DEFAULT_POOL, choices=POOLS,
                        help="what control draws are drawn from: live (default; heads whose o_proj columns are all "
                             "zero write nothing and are left out) or all (uniform over all heads, the paper's "
                             "definition; the report then states each draw's dead heads)")


def add_wait_option(parser: argparse.ArgumentParser) -> None:
    """--wait, for every command that writes an output folder or file (its lock: vrh_lmms.base.folder_lock)."""
    parser.add_argument("--wait", action="store_true",
                        help="if another vrh-lmms run holds the output, wait for it to end (default: refuse, naming "
                             "it)")


def add_generation_options(parser: argparse.ArgumentParser) -> None:
    """--gen-kwargs and --allow-cross-model, for the commands that generate with a heads file's heads."""
    parser.add_argument("--gen-kwargs", default=None,
                        help="lmms-eval generation kwargs, e.g. max_new_tokens=16 (default: the task's own)")
    parser.add_argument("--allow-cross-model", action="store_true", help="use a heads file of another geometry")
