"""Output folders of `vrh-lmms steer` and `vrh-lmms patch`, and the checks both run before their model loads.

Both are jobs of the runner (vrh_lmms.runs.runner): a manifest (JSON) records what was asked; a rerun with the same
identity keeps every finished piece (a piece is finished when its file or folder exists: all are written to a
temporary name and renamed, through vrh_lmms.base.atomic), a different identity is refused unless `force`, which then
removes exactly the files of the command's layout (vrh_lmms.base.owned); a folder holding anything the command did
not write is always refused.
"""

from __future__ import annotations

from collections.abc import Sequence

from vrh_lmms.base import owned
from vrh_lmms.base.errors import VRHError
from vrh_lmms.runs.preflight import Checks, every_doc
from vrh_lmms.runs.runner import Job


def beside(manifest: str, check: owned.Check) -> owned.Check:
    """A file that counts as ours only next to our manifest (a report.md, a plot)."""
    return lambda p: p.is_file() and not p.is_symlink() and check(p.with_name(manifest))


def temporaries(*names: str) -> dict[str, owned.Check]:
    """The `.<name>.*` files an atomic write of each name leaves when it is killed."""
    return {f".{name}.*": owned.is_file for name in names}


def intervention_checks(spec, command: str, job: Job, configurations: Sequence) -> Checks:
    """The checks of steering and patching, declared for the corridor (vrh_lmms.runs.preflight.preflight runs them
    before the model loads, writing nothing). `spec` has model, model_args, tasks, heads_file, limit,
    allow_cross_model; `configurations` (id, k, seed, spec, pool) are the head sets the run will resolve
    (Ready.headsets hands them forward)."""

    def settings() -> None:
        if spec.limit is not None and spec.limit <= 0:
            raise VRHError(f"--limit must be positive, got {spec.limit}")

    intact = f"{command} runs on the intact model (it chooses its own head sets), so no model arg may set heads"
    return Checks(command, spec.model, spec.model_args, list(spec.tasks), spec.heads_file, needs_heads_file=True,
                  head_args=intact, batch_size=getattr(spec, "batch_size", 1), configurations=configurations,
                  allow_cross_model=spec.allow_cross_model, settings=settings, job=lambda ready: job,
                  docs=every_doc(spec.limit))
