"""Pick the compute device so users never have to pass `--device cpu` on a machine without CUDA."""

from __future__ import annotations

import os

import torch


def default_device() -> str:
    """`cuda:<local rank>` under a multi-process launch with CUDA, `cuda` with CUDA, else `cpu`."""
    if torch.cuda.is_available():
        local_rank = os.environ.get("LOCAL_RANK")
        return f"cuda:{local_rank}" if local_rank is not None else "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def default_device_map() -> str:
    """lmms-eval backends default to `device_map=auto`, which moves inputs to CUDA; on CPU it must be `cpu`."""
    dev = default_device()
    return "auto" if dev == "cuda" else dev
