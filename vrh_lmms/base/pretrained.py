"""The checkpoint a model loads from (`pretrained=` / `--model`): a local folder with config.json, or a hub id that can
be fetched. Checked before any weights load, so a typo fails in one line; the model wrappers (around their load) and
the pre-load checks (vrh_lmms.harness.preload) both use it.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from huggingface_hub import try_to_load_from_cache

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.paths import assets_path
from vrh_lmms.base.synth.demo_spec import DemoSpec

HUB_EXAMPLE = "Qwen/Qwen2.5-VL-7B-Instruct"
DEMO_NAME = "vrh-demo"  # `pretrained=vrh-demo`: the shipped demo model, with the settings it was trained with
DEMO_FAMILY = "qwen2_5_vl"
PROBE_TIMEOUT_ENV = "VRH_HUB_PROBE_TIMEOUT"  # seconds the one hub probe may take (default 3)
DEMO_TASK = "vrh_demo_grounding"  # the task the demo model reads: its own held-out scenes (tasks/synth)
CHOOSE = f"choose a checkpoint with pretrained=FOLDER or pretrained=ORG/NAME, or pretrained={DEMO_NAME} for the " \
         f"shipped demo model with --tasks {DEMO_TASK} (the held-out scenes it was trained on; RefCOCO needs a " \
         f"real VLM and the hub)"


def hub_offline() -> bool:
    """Whether HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is set."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _in_hub_cache(repo_id: str) -> bool:
    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # an invalid repo id
        return False


def demo_folder() -> Path:
    """The shipped demo model's folder (vrh_lmms/assets/demo_model)."""
    return assets_path() / "demo_model"


def is_demo_name(value: Any) -> bool:
    return value is not None and str(value).strip() == DEMO_NAME


def named_model_args(args: dict[str, Any], family: str | None = None) -> dict[str, Any]:
    """`pretrained=vrh-demo` becomes the shipped demo model's folder plus the model args it was trained with (dtype,
    pixels, image position; `DemoSpec.model_args`); args the user set win. Other args are returned unchanged."""
    if not is_demo_name(args.get("pretrained")):
        return args
    if family is not None and family != DEMO_FAMILY:
        raise VRHError(f"pretrained={DEMO_NAME} is the shipped Qwen2.5-VL demo model; load it with --model vrh_qwen25")
    # demo.spec holds the model's data settings (it imports only vrh_lmms.base.synth.scenes)
    folder = demo_folder()
    if not (folder / "config.json").is_file():
        raise VRHError(f"pretrained={DEMO_NAME}: the shipped demo model is missing from {folder}; reinstall vrh-lmms")
    return {**DemoSpec.load(folder).model_args(), **args, "pretrained": str(folder)}


@functools.lru_cache(maxsize=1)
def _hub_answers() -> str | None:
    """None when the hub answers one HEAD request within the probe timeout, else why not (probed once a process)."""
    # deferred: keeps `the base floor` free of requests
    import requests

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    timeout = float(os.environ.get(PROBE_TIMEOUT_ENV, "3") or 3)
    try:
        requests.head(endpoint, timeout=timeout, allow_redirects=False)
    except requests.RequestException as exc:
        return f"the hub ({endpoint}) did not answer within {timeout:g} s ({type(exc).__name__})"
    return None


def check_hub_reachable(value: Any, given: bool = True) -> None:
    """A hub id that is not in the local cache needs the hub: when one short probe finds it unreachable, one line
    naming the checkpoint tried and how to choose another, instead of a minute of retries. `given`: whether the user
    named it (False: the backend's default, which the line says). With the offline variables set a named checkpoint
    is left to the load, which then fails at once (no retries) in one line; the default is refused here."""
    if value is None or is_demo_name(value):
        return
    text = str(value).strip()
    if Path(text).expanduser().exists() or _in_hub_cache(text):
        return
    if hub_offline():
        if given:
            return
        why = "HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE is set"
    else:
        why = _hub_answers()
        if why is None:
            return
    default = "" if given else " (the backend's default: no pretrained= was given)"
    raise VRHError(f"pretrained={text}{default} is not in the local hub cache and {why}; {CHOOSE}")


def check_pretrained(value: Any, name: str = "pretrained") -> None:
    """A checkpoint folder with config.json, or a hub id that can be fetched; anything else is one line.

    A value that looks like a path (absolute, ./, ~, more than one '/', or its first part an existing local folder)
    is never sent to the hub, where a typo would retry for a minute and end in a traceback."""
    if value is None or str(value).strip() == "" or is_demo_name(value):
        return
    text = str(value).strip()
    path = Path(text).expanduser()
    expected = f"expected a checkpoint folder (with config.json) or a hub id such as {HUB_EXAMPLE}"
    # a command-line option reads `--model DIR`, a model arg `pretrained=DIR`
    label = f"{name} {text}" if name.startswith("-") else f"{name}={text}"
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise VRHError(f"{label}: the folder has no config.json; {expected}")
        return
    if path.exists():
        raise VRHError(f"{label}: is a file, not a folder; {expected}")
    parts = text.split("/")
    path_like = text.startswith(("/", ".", "~")) or "\\" in text or len(parts) != 2
    local_prefix = not path_like and Path(parts[0]).is_dir()
    path_like = path_like or local_prefix
    if path_like and not (len(parts) <= 2 and _in_hub_cache(text)):
        where = f" ({parts[0]}/ exists here, but holds no {'/'.join(parts[1:])})" if local_prefix else ""
        raise VRHError(f"{label}: no such folder{where}; {expected}")
    # A hub id: `load_config` (before the load) and the wrapper (around it) turn a failed fetch into one line.
