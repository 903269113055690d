"""Backends that cast pixel inputs to bfloat16 whatever dtype the model has (lmms-eval's gemma3 casts every input;
Llama 4's image processor normalises in bfloat16): a pre-hook gives the pixels the vision tower's dtype, so a float32
model (`dtype=float32`) runs; a bfloat16 model runs exactly as without it."""

from __future__ import annotations

from torch import nn


def _pixels_in_tower_dtype(tower: nn.Module, args: tuple, kwargs: dict):
    dtype = next(tower.parameters()).dtype
    pixels = kwargs.get("pixel_values")
    if pixels is not None and pixels.dtype != dtype:
        kwargs["pixel_values"] = pixels.to(dtype)
    elif args and getattr(args[0], "dtype", dtype) != dtype and args[0].is_floating_point():
        args = (args[0].to(dtype), *args[1:])
    return args, kwargs


def pixels_follow_tower(tower: nn.Module) -> None:
    tower.register_forward_pre_hook(_pixels_in_tower_dtype, with_kwargs=True)
