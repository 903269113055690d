"""Several ranks (`torchrun`, `accelerate launch --multi_gpu`) give exactly the files one process gives.

lmms-eval shards docs across ranks (rank r answers docs r, r + W, r + 2W, ...), pads the shorter shards with copies
of their last request (answers that are never scored) and gathers samples and per-doc metrics on rank 0 rank after
rank. vrh-lmms adds what lmms-eval leaves to its caller:

- the executor backend that fits the launch (`executor_backend`): lmms-eval's "accelerate" path gathers through the
  model's Accelerator, which spans the ranks only where accelerate set the job up on GPUs; on CPU (gloo) the
  Accelerator sees one process and its gather of a 0-d tensor comes back as a scalar, so the "torchrun" path (plain
  torch.distributed) is used there;
- one doc order (`doc_order`): the gathered samples and metrics are put back in the order one process produces
  before rank 0 aggregates them, so sample files and float metrics are identical to a one-process run;
- the rank seen before lmms-eval has run (`rank`, from the launcher's environment: backends built on CPU report
  rank 0 everywhere until the first evaluation), one barrier and one broadcast for the writes only rank 0 makes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any


def world_size() -> int:
    """Ranks of this job, as the launcher set them (1 outside torchrun / accelerate launch)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def rank() -> int:
    """This process's global rank, as the launcher set it."""
    return int(os.environ.get("RANK", "0") or 0)


def is_main() -> bool:
    return rank() == 0


def ensure_group() -> None:
    """Start torch.distributed where the launcher asked for several ranks, the way lmms-eval's backends will
    (accelerate's shared state: NCCL where every rank has a GPU, gloo on CPU), so vrh-lmms can synchronise its own
    writes before the model loads. Nothing happens in a single process."""
    if world_size() <= 1:
        return
    # deferred: keeps `vrh-lmms --help` free of torch
    import torch.distributed as dist

    if dist.is_available() and not dist.is_initialized():
        # deferred: keeps `vrh-lmms --help` free of accelerate
        from accelerate import PartialState

        import_world_readers()
        PartialState()
        if not dist.is_initialized():  # accelerate left it to the backend (e.g. MULTI_CPU): plain gloo
            dist.init_process_group(backend="gloo")
        if is_main():  # for the person: on the terminal, whatever a console session does with stderr
            # deferred: keeps `vrh-lmms --help` free of filelock
            from vrh_lmms.base import console

            console.note(f"vrh-lmms: {world_size()} ranks ({_backend_name()}): lmms-eval splits the docs across them, "
                         f"rank 0 writes the files")


def import_world_readers() -> None:
    """Import, before any process group exists, the torch modules that read the world group into default arguments
    when they are imported (torch.distributed.nn.functional: `group=group.WORLD`). Imported later (torch._dynamo
    imports it when a model loads), they would hold the group past `close_group`: its gloo threads would then stop
    only while the interpreter finalises, where a rank can abort after its work is done."""
    # deferred: keeps `vrh-lmms --help` free of torch
    import torch.distributed.nn.functional  # noqa: F401


def _backend_name() -> str:
    # deferred: keeps `vrh-lmms --help` free of torch
    import torch.distributed as dist

    try:
        return str(dist.get_backend_config())
    except (RuntimeError, AttributeError, ValueError):
        return str(dist.get_backend())


def _group_ready() -> bool:
    if world_size() <= 1:
        return False
    # deferred: keeps `vrh-lmms --help` free of torch
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def barrier() -> None:
    """Wait for every rank (no-op in a single process)."""
    if _group_ready():
        # deferred: keeps `vrh-lmms --help` free of torch
        import torch.distributed as dist

        dist.barrier()


def close_group() -> None:
    """Tear this rank's process group down while the interpreter is still whole (no-op in one process or when no
    group is up). Left to the interpreter's exit, gloo's worker threads can drop their last tensors after Python has
    begun to finalise, and the rank aborts ("terminate called without an active exception") after its work is done,
    which fails the whole job. The threads stop here only if nothing else holds the group (`import_world_readers`).
    Not collective: every rank calls it once its own last collective has returned."""
    if _group_ready():
        # deferred: keeps `vrh-lmms --help` free of torch
        import torch.distributed as dist

        dist.destroy_process_group()


def broadcast(value: Any) -> Any:
    """Rank 0's `value` on every rank (picklable values; no-op in a single process)."""
    if not _group_ready():
        return value
    # deferred: keeps `vrh-lmms --help` free of torch
    import torch.distributed as dist

    box = [value if is_main() else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_dicts(value: dict) -> dict | None:
    """Every rank's dict merged on rank 0 (rank 0's entries first, later ranks' added); None on other ranks."""
    if not _group_ready():
        return value
    # deferred: keeps `vrh-lmms --help` free of torch
    import torch.distributed as dist

    parts: list | None = [None] * world_size() if is_main() else None
    dist.gather_object(value, parts, dst=0)
    if parts is None:
        return None
    merged: dict = {}
    for part in parts:
        merged.update(part or {})
    return merged


def executor_backend(lm) -> str:
    """lmms-eval's `distributed_executor_backend` for this launch: "accelerate" where the model's Accelerator spans
    every rank (its gather then works), "torchrun" (torch.distributed directly) where it does not."""
    n = world_size()
    if n <= 1:
        return "accelerate"  # lmms-eval's default; no collective runs
    accelerator = getattr(lm, "accelerator", None)
    if accelerator is not None and getattr(accelerator, "num_processes", 1) == n:
        return "accelerate"
    return "torchrun"


def one_process_order(n: int, ranks: int) -> list[int]:
    """For a list gathered rank after rank from an evaluation of `n` docs (rank r holding docs r, r + W, ...), the
    doc position each entry has in the one-process order."""
    return [r + ranks * j for r in range(ranks) for j in range(len(range(r, n, ranks)))]


def _restore(items: list, ranks: int) -> list:
    order = one_process_order(len(items), ranks)
    out: list = [None] * len(items)
    for pos, doc in enumerate(order):
        out[doc] = items[pos]
    return out


def restore_task_output(task_output, ranks: int) -> None:
    """Put one task's gathered metrics and logged samples back in one-process doc order (rank 0, before
    aggregation). Samples are sorted by doc id; metric lists of one value per doc are de-interleaved."""
    samples = list(task_output.logged_samples or [])
    ids = [s.get("doc_id") for s in samples if isinstance(s, dict)]
    if len(ids) == len(samples) and len(set(ids)) == len(ids):
        task_output.logged_samples = sorted(samples, key=lambda s: s["doc_id"])
    for store in (task_output.sample_metrics, task_output.per_sample_metrics):
        for key, items in list(store.items()):
            store[key] = _restore(list(items), ranks)


@contextlib.contextmanager
def doc_order() -> Iterator[None]:
    """While an evaluation runs on several ranks, rank 0 aggregates the gathered results in one-process doc order."""
    ranks = world_size()
    if ranks <= 1 or not is_main():
        yield
        return
    # deferred: keeps `vrh-lmms --help` free of lmms_eval
    from lmms_eval.evaluator_utils import TaskOutput

    original = TaskOutput.calculate_aggregate_metric

    def ordered(self, *args, **kwargs):
        restore_task_output(self, ranks)
        return original(self, *args, **kwargs)

    TaskOutput.calculate_aggregate_metric = ordered
    try:
        yield
    finally:
        TaskOutput.calculate_aggregate_metric = original


def error_prefix() -> str:
    """"rank R of W: " in a multi-rank job (so the launcher's interleaved output names the failing rank), else ""."""
    n = world_size()
    return f"rank {rank()} of {n}: " if n > 1 else ""
