"""The checkpoint a model loads from (`pretrained=` / `--model`): a local folder with config.json, or a hub id that can
be fetched. Checked before any weights load, so a typo fails in one line; the model wrappers (around their load) and
the pre-load checks (vrh_lmms.harness.preload) both use it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vrh_lmms.base.errors import VRHError

HUB_EXAMPLE = "Qwen/Qwen2.5-VL-7B-Instruct"


def hub_offline() -> bool:
    """Whether HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is set."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _in_hub_cache(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # an invalid repo id
        return False


def check_pretrained(value: Any, name: str = "pretrained") -> None:
    """A checkpoint folder with config.json, or a hub id that can be fetched; anything else is one line.

    A value that looks like a path (absolute, ./, ~, more than one '/', or its first part an existing local folder)
    is never sent to the hub, where a typo would retry for a minute and end in a traceback."""
    if value is None or str(value).strip() == "":
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
