"""Pick the compute device so users never have to pass `--device cpu` on a machine without CUDA."""

from __future__ import annotations

import importlib.metadata
import os
import time

import torch

from vrh_lmms.base.errors import VRHError


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


THREADS_ENV = "VRH_THREADS"


def _busy_cores(cores: int, interval: float = 0.2) -> float:
    """How many of our cores other work keeps busy right now: sampled from /proc/stat over `interval` (Linux),
    else the 1-minute load average."""
    def snapshot() -> tuple[int, int] | None:
        try:
            with open("/proc/stat") as f:
                fields = [int(v) for v in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields[:8]), idle

    first = snapshot()
    if first is not None:
        time.sleep(interval)
        second = snapshot()
        if second is not None and second[0] > first[0]:
            busy_share = 1.0 - (second[1] - first[1]) / (second[0] - first[0])
            return busy_share * (os.cpu_count() or cores)
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def usable_cores() -> int:
    """Cores this process may run on (CPU affinity, e.g. taskset or a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def free_cores() -> int:
    """Cores not kept busy by other processes: usable cores minus the busy ones (at least 1)."""
    cores = usable_cores()
    return max(1, min(cores, round(cores - _busy_cores(cores))))


def choose_threads() -> int | None:
    """Set torch's CPU thread count; returns the count set, or None when left alone.

    torch uses one thread per core; with other work on the machine its threads then wait on each other (the demo
    took 31 s instead of 20 s with one busy process on 2 cores). `VRH_THREADS=N` sets N, `VRH_THREADS=torch`
    keeps torch's default, and an explicit `OMP_NUM_THREADS` is respected; otherwise the count is the number of
    free cores. Only on CPU: on a GPU the threads feed the device and torch's default stands."""
    choice = os.environ.get(THREADS_ENV, "").strip().lower()
    if choice == "torch" or (not choice and os.environ.get("OMP_NUM_THREADS")):
        return None
    if choice:
        try:
            threads = int(choice)
        except ValueError:
            raise VRHError(f"{THREADS_ENV}={choice!r}: expected a thread count or 'torch'") from None
    elif default_device() == "cpu":
        threads = free_cores()
    else:
        return None
    threads = max(1, threads)
    torch.set_num_threads(threads)
    return threads


SAME_INDEX = ("pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu (or the CUDA index "
              "matching your driver)")


def check_torch_builds() -> None:
    """torch and torchvision must come from one build (one index, matching versions): a CPU torch beside PyPI's
    torchvision (built for PyPI's torch) fails inside transformers' lazy imports with a 90-line traceback ending in
    `Could not import module 'AttentionInterface'`; here it is one line, before any model loads."""
    try:
        # deferred: optional dependency (torchvision), imported here only to check its build against torch's
        import torchvision  # noqa: F401
    except ModuleNotFoundError as exc:
        if exc.name == "torchvision":
            return  # not installed: the models that need it say so themselves
        raise VRHError(_mismatch(exc)) from None
    except (RuntimeError, ImportError, OSError, AttributeError) as exc:
        raise VRHError(_mismatch(exc)) from None


def _mismatch(exc: BaseException) -> str:
    try:
        vision = importlib.metadata.version("torchvision")
    except importlib.metadata.PackageNotFoundError:
        vision = "?"
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return (f"torch {torch.__version__} and torchvision {vision} come from different builds (importing torchvision "
            f"fails: {first}); install both from the same index: {SAME_INDEX}")
