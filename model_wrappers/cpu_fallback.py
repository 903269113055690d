"""Run backends that hard-code `cuda:<rank>` on a machine without CUDA.

lmms-eval's remote-code InternVL backends (internvl2, internvl3, internvl3_5) ignore their `device` argument in a
single process and always load to, and move inputs to, `cuda:<rank>`. Mixed in before such a backend, these two
properties turn every CUDA device the backend assigns into the CPU when no CUDA device exists; with CUDA they
store exactly what the backend assigns.
"""

from __future__ import annotations

from typing import Any

import torch


def _cpu_if_no_cuda(value: Any) -> Any:
    if torch.cuda.is_available():
        return value
    if isinstance(value, torch.device) and value.type == "cuda":
        return torch.device("cpu")
    if isinstance(value, str) and value.startswith("cuda"):
        return "cpu"
    return value


class CudaToCpuFallback:
    """Mix in after VRHMixin and before the backend class."""

    @property
    def _device(self) -> torch.device:
        return self.__dict__["_vrh_device"]

    @_device.setter
    def _device(self, value: Any) -> None:
        self.__dict__["_vrh_device"] = _cpu_if_no_cuda(torch.device(value) if isinstance(value, str) else value)

    @property
    def device_map(self) -> Any:
        return self.__dict__.get("_vrh_device_map")

    @device_map.setter
    def device_map(self, value: Any) -> None:
        self.__dict__["_vrh_device_map"] = _cpu_if_no_cuda(value)
