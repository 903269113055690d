"""`vrh-lmms eval ARGS...`: the lmms-eval command line, with our tasks included and the device chosen.

Everything after `eval` is lmms-eval's own arguments. Added for you: the plugin's task folder on the include path
(beside any `--include_path` you pass), `--device cpu` and `device_map=cpu` when there is no GPU, and one clear
error line (exit 2) for bad vrh model args. The exit code is non-zero when no results file was written.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
from pathlib import Path

from vrh_lmms.device import default_device, default_device_map
from vrh_lmms.paths import tasks_path


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("lmms_args", nargs=argparse.REMAINDER, help="arguments for lmms-eval (--model ... --tasks ...)")


def _add_device_map(model: str, model_args: str) -> str:
    """Base lmms-eval backends default to device_map=auto (CUDA); on CPU they need device_map=cpu."""
    if "device_map=" in (model_args or "") or default_device_map() == "auto":
        return model_args
    try:
        from lmms_eval.models import get_model

        cls = get_model(model)
    except Exception:
        return model_args
    if "device_map" not in inspect.signature(cls.__init__).parameters:
        return model_args
    extra = f"device_map={default_device_map()}"
    return f"{model_args},{extra}" if model_args else extra


def run(args: argparse.Namespace) -> int:
    return passthrough(args.lmms_args)


def passthrough(lmms_args: list[str]) -> int:
    rest = [a for a in lmms_args if a != "--"]
    sys.argv = ["lmms-eval", *rest]
    os.environ["VRH_LMMS_CLI"] = "1"
    from lmms_eval.__main__ import cli_evaluate, parse_eval_args

    _, parsed = parse_eval_args()
    if parsed.model:
        from lmms_eval.models import list_available_models

        from vrh_lmms.errors import VRHError
        from vrh_lmms.preload import vrh_model_names

        if parsed.model not in list_available_models(include_aliases=True):
            raise VRHError(f"--model {parsed.model!r} is not a registered model; the vrh-lmms models are: "
                           f"{', '.join(vrh_model_names())} (lmms-eval's own: `lmms-eval --help`)")
    includes = [str(tasks_path())]
    if parsed.include_path:
        includes.append(parsed.include_path)
    parsed.include_path = includes
    if parsed.device is None and not default_device().startswith("cuda"):
        parsed.device = default_device()
    if parsed.model and parsed.tasks not in (None, "list", "list_groups", "list_tags", "list_subtasks"):
        parsed.model_args = _add_device_map(parsed.model, parsed.model_args)
    before = set(Path(parsed.output_path).rglob("*_results.json")) if parsed.output_path else set()
    cli_evaluate(parsed)
    if parsed.output_path and parsed.tasks not in (None, "list", "list_groups", "list_tags", "list_subtasks"):
        after = set(Path(parsed.output_path).rglob("*_results.json"))
        if not after - before:
            print("vrh-lmms: error: lmms-eval wrote no results file (see the log above)", file=sys.stderr)
            return 1
    return 0
