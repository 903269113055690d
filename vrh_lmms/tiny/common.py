"""Shared helpers for the tiny checkpoint factories."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed every RNG that weight init touches, and restore the global torch RNG afterwards."""
    state = torch.random.get_rng_state()
    py_state = random.getstate()
    np_state = np.random.get_state()
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    try:
        yield
    finally:
        torch.random.set_rng_state(state)
        random.setstate(py_state)
        np.random.set_state(np_state)


def save_checkpoint(out_dir: str | Path, model, processor, tokenizer) -> Path:
    """Save model (safetensors), processor, tokenizer and chat template side by side, as hub checkpoints are."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    if processor is not None:
        processor.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
