"""`vrh-lmms sweep`: baseline, top-k, random-k and layer-matched random-k ablations with one model load.

Each configuration is evaluated through lmms-eval's evaluator and written as `configs/<id>/` (results.json +
samples_<task>.jsonl), atomically. Everything that needs no forward pass is checked before the model loads
(`vrh_lmms.runs.sweep.checks`). A rerun skips finished configurations and redoes partial ones; a folder holding a
different sweep with finished configurations is refused unless `force`, and one holding files vrh-lmms did not
write is always refused.

Configurations run in packs (`pack`, default automatic): the first lmms-eval pass of a pack generates every answer
of the pack in shared batches, the passes of the others replay them (vrh_lmms.model.packing). Each configuration still
has its own evaluator pass, so the files are those of an unpacked sweep. Uniform-attention ablations (`uniform`,
`uniform_image`) edit attention, not o_proj rows, so they always run alone (`unpackable_reason`). With the default
engine `fast` (vrh_lmms.harness.sweep_engine) the task, the docs' images and the processor's outputs are built once, and
a pack's answers are generated before its passes, several docs per generate; `lmms` rebuilds them per configuration.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vrh_lmms.base import console, gc_startup
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.plan import Configuration, carried_pool, check_headsets, from_dict
from vrh_lmms.base.heads.spec import HeadSet
from vrh_lmms.harness import sweep_engine as engine
from vrh_lmms.runs.checks import dead_head_names, dead_heads_of
from vrh_lmms.runs.preflight import preflight
from vrh_lmms.runs.runner import Job
from vrh_lmms.runs.sweep import checks, control_docs
from vrh_lmms.runs.sweep.exclusion import exclusion_record
from vrh_lmms.runs.sweep.packs import pack_groups, unpackable_reason

MANIFEST = checks.MANIFEST
# automatic --pack: how many batch rows (batch size x configurations) one generate call may carry. CPU: per
# configuration, the demo model's generation kept getting cheaper up to ~100 rows (benchmarks/RESULTS.md); CUDA: the
# range benchmarks/gpu/bench_pack_7b.py measures, and at most half the free memory for the rows' KV caches.
AUTO_PACK_ROWS = {"cuda": 32, "cpu": 100}
KV_TOKENS_PER_ROW = 4096
# the fast engine's rows per generate on CPU (docs x configurations): on the demo model (21 configurations, batch 1,
# 2 cores) 42 rows ran 15-20% faster than 21 or 84 (benchmarks/RESULTS.md)
STACKED_ROWS_CPU = 48  # prompt + answer length assumed when sizing KV caches


@dataclass
class SweepSpec:
    model: str
    model_args: str
    tasks: list[str]
    heads_file: str | None
    configurations: list[Configuration]
    limit: int | float | None = None
    batch_size: int = 1
    gen_kwargs: str | None = None
    seed: int = 0
    allow_cross_model: bool = False
    pack: int | None = None  # configurations per pack; None = automatic. Not part of the identity: same files.
    # what control draws come from: the pool the configurations carry (plan_configurations(pool=)); None takes it
    # from them, a pool given must agree with them
    control_pool: str | None = None
    # leave out the docs the heads file was found on (vrh_lmms.runs.sweep.exclusion): "off", "on" (refused where
    # discovery used none of the tasks) or "auto" (the paper preset: wherever it used one)
    exclude_discovery_docs: str = "off"
    # how configurations are evaluated (vrh_lmms.harness.sweep_engine): "fast" builds the task and the pack's model
    # inputs once, "lmms" rebuilds them per configuration as a plain lmms-eval run does. Not part of the identity: same
    # files.
    engine: str = "fast"
    # evaluate the control configurations on a seeded image subset of about this many docs per task
    # (vrh_lmms.runs.sweep.control_docs); None: every doc
    control_docs: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.control_pool = carried_pool(self.configurations, self.control_pool)

    def identity(self, heads_sha: str | None) -> dict[str, Any]:
        """What must match for a folder to be resumed rather than refused."""
        return {"model": self.model, "model_args": self.model_args, "tasks": self.tasks,
                "heads_file_sha256": heads_sha, "limit": self.limit, "gen_kwargs": self.gen_kwargs,
                "seed": self.seed, "control_pool": self.control_pool} \
            | ({"control_docs": self.control_docs} if self.control_docs is not None else {})


def manifest_fields(spec: SweepSpec, started: float, pack: int | None = None, dead: list[str] | None = None,
                    excluded: dict[str, Any] | None = None) -> dict[str, Any]:
    """sweep.json's fields besides the identity and the configurations (written by vrh_lmms.runs.runner)."""
    return {"heads_file": spec.heads_file, "batch_size": spec.batch_size, "pack": pack,
            **({"excluded_docs": excluded} if excluded is not None else {}),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
            "control_pool": spec.control_pool, "dead_heads": dead}


def describe_configurations(job: Job, spec: SweepSpec) -> None:
    """Give the runner's job the sweep's configurations: its units, and how sweep.json lists them."""
    by_id = {c.id: c for c in spec.configurations}
    job.units = list(by_id)
    job.describe = lambda uid: by_id[uid].to_dict()
    job.extra = dict(spec.extra)


def run_sweep(spec: SweepSpec, output: str | Path, force: bool = False, lm=None, progress: bool = True) -> Path:
    """Run every configuration not yet done. `lm` may be passed in to reuse a loaded model. On several ranks every
    rank checks and evaluates, rank 0 alone changes the folder (vrh_lmms.harness.distributed)."""
    # deferred: keeps `vrh-lmms demo --help` free of lmms_eval, torch
    from vrh_lmms.harness import distributed

    out = Path(output)
    fast = engine.check_engine(spec.engine) == "fast"
    budget = engine.CacheBudget(engine.cache_bytes()) if fast else None  # VRH_SWEEP_CACHE, checked before the load
    control_docs.check_control_docs(spec.control_docs)
    distributed.ensure_group()
    ready = preflight(checks.sweep_checks(spec, out), force, lm=lm)  # nothing is written before every check passed
    sweep = _Sweep(spec, out, ready, fast=engine.check_fast_engine(spec.engine), budget=budget)  # its seam too
    sweep.draw_control_docs()
    if sweep.claim(lm):  # the folder, the manifest; False when every configuration is done (no model loads)
        sweep.load()  # the model once, its geometry and dead heads against every head set, the pack size
        sweep.announce()  # what is unavailable or runs unpacked
        sweep.evaluate(progress)  # pack by pack, each configuration's folder published as it ends
    return out


@dataclass
class _Sweep:
    """A sweep whose checks have passed (run_sweep's steps, in order): the state its steps hand on."""

    spec: SweepSpec
    out: Path
    ready: Any  # vrh_lmms.runs.preflight.Ready: heads file, task manager, runner, head sets, means, offsets
    fast: bool
    budget: Any = None  # sweep_engine.CacheBudget: the fast engine's caches share it (VRH_SWEEP_CACHE)
    subset: Any = None  # control_docs.Subset: the docs the controls run on
    started: float = 0.0
    pack: int | None = None
    dead_names: list[str] | None = None
    lm: Any = None
    geometry: Any = None
    dead: tuple = ()
    todo: list[Configuration] = field(default_factory=list)

    @property
    def excluded(self) -> dict[str, Any] | None:
        offsets = self.ready.found["offsets"]
        return exclusion_record(offsets, self.spec.heads_file) if offsets else None

    def draw_control_docs(self) -> None:
        # deferred: keeps `vrh-lmms demo --help` free of lmms_eval
        from vrh_lmms.harness import doc_subset

        spec = self.spec
        if spec.control_docs is not None:
            self.subset = control_docs.draw(doc_subset.doc_images(self.ready.task_manager, spec.tasks, spec.limit,
                                                                  self.ready.found["offsets"]),
                                            spec.control_docs, spec.seed)
            self.spec = replace(spec, extra={**spec.extra, "control_docs": self.subset.record()})

    def claim(self, lm) -> bool:
        """Take the folder (its manifest lists every configuration, earlier runs' finished ones too); whether any
        configuration is pending."""
        # deferred: keeps `vrh-lmms demo --help` free of torch
        from vrh_lmms.harness import distributed

        self.started = time.time()
        runner = self.ready.runner
        runner.lm, runner.unavailable = lm, dict(self.ready.unavailable)
        if distributed.is_main():
            earlier = earlier_configurations(self.spec, runner.recorded(), self.out / "configs")
            self.spec = replace(self.spec, configurations=self.spec.configurations + earlier)
        describe_configurations(runner.job, self.spec)
        self.pack = self.spec.pack
        runner.job.fields = lambda: manifest_fields(self.spec, self.started, self.pack, self.dead_names,
                                                    self.excluded)
        runner.claim()  # nothing is written before every check has passed
        return bool(runner.pending)

    def load(self) -> None:
        # deferred: keeps `vrh-lmms demo --help` free of lmms_eval, torch
        from vrh_lmms.harness import lmms

        spec, runner = self.spec, self.ready.runner
        lm = self.lm = runner.model(lambda: lmms.build_model(spec.model, spec.model_args, batch_size=spec.batch_size))
        gc_startup.settle()  # start-up's objects (modules, model, tasks) frozen: later collections skip them
        self.geometry, self.dead = lm.vrh_decoder.geometry, dead_heads_of(lm)
        # the loaded model's own geometry and dead heads, before the first evaluation
        runner.unavailable = check_headsets(spec.configurations, self.geometry, self.ready.heads_file, self.dead,
                                            spec.allow_cross_model, self.ready.headsets)
        pending = set(runner.pending)
        self.todo = [c for c in spec.configurations if c.id in pending]
        checks.check_modes(spec, lm.model)
        packable = [c for c in self.todo if unpackable_reason(c) is None]
        self.pack = choose_pack(spec.pack, lm, len(packable), spec.batch_size)
        self.dead_names = dead_head_names(lm)
        runner.write_manifest()

    def announce(self) -> None:
        # deferred: keeps `vrh-lmms demo --help` free of torch
        from vrh_lmms.harness import distributed

        unavailable = self.ready.runner.unavailable
        if distributed.rank() != 0:
            return
        if unavailable:
            first = next(iter(unavailable))
            more = f" and {len(unavailable) - 1} more" if len(unavailable) > 1 else ""
            console.note(f"vrh-lmms: note: {first}{more} unavailable: {unavailable[first]}")
        alone = [c for c in self.todo if unpackable_reason(c) is not None]
        if self.pack > 1 and alone:
            ids = ", ".join(c.id for c in alone[:4]) + (f" and {len(alone) - 4} more" if len(alone) > 4 else "")
            console.note(f"vrh-lmms: note: {ids} run unpacked: {unpackable_reason(alone[0])}")

    def subset_of(self, cfg: Configuration) -> dict[str, list[int]] | None:
        return self.subset.tasks if self.subset is not None and control_docs.is_control(cfg) else None

    def evaluate(self, progress: bool) -> None:
        # deferred: keeps `vrh-lmms demo --help` free of lmms_eval, torch
        from vrh_lmms.harness import distributed, doc_subset, lmms

        spec, lm, runner, ready = self.spec, self.lm, self.ready.runner, self.ready
        tm, means, offsets, excluded = ready.task_manager, ready.found["means"], ready.found["offsets"], self.excluded
        rank = distributed.rank()
        bar = _progress(len(self.todo), enabled=progress and rank == 0)
        subset_of = self.subset_of

        def headset_of(cfg: Configuration):  # resolved by the checks (ready.headsets), not drawn again
            return ready.headsets.get(cfg, self.geometry, self.dead)

        def evaluate_and_write(cfg: Configuration) -> None:
            bar.set_description(cfg.id)
            results = lmms.evaluate(lm, spec.tasks, tm, limit=spec.limit, gen_kwargs=spec.gen_kwargs,
                                    seed=spec.seed, offsets=offsets)
            doc_subset.count_subset(results, subset_of(cfg))
            if rank == 0 and results is not None:
                record = lm.vrh_record(config={"id": cfg.id, "kind": cfg.kind, "k": cfg.k, "seed": cfg.seed}
                                       | ({"cell": cfg.cell} if cfg.cell else {}))
                if excluded is not None:
                    record["excluded_docs"] = excluded
                if subset_of(cfg) is not None:
                    record["doc_subset"] = self.subset.record()
                lmms.write_run(self.out / "configs" / cfg.id, results, record)
                runner.finish(cfg.id)
            distributed.barrier()  # a rank that died ends the job here, before any later configuration starts
            bar.update(1)

        fast, pack, todo = self.fast, self.pack, self.todo
        try:
            with engine.fast_session(lm, lmms.own_tasks(tm, spec.tasks), self.budget) if fast \
                    else contextlib.nullcontext():
                # controls on the doc subset run in packs of their own, so a pack's generations cover one doc set
                on_subset = [c for c in todo if subset_of(c) is not None]
                groups = pack_groups([c for c in todo if subset_of(c) is None], pack) + pack_groups(on_subset, pack)
                for group in groups:
                    headsets = [headset_of(cfg) for cfg in group]
                    if len(group) == 1:
                        lm.vrh_apply(headsets[0], mode=group[0].mode if headsets[0].heads else "zero", means=means)
                        with doc_subset.restrict_docs(subset_of(group[0])):
                            evaluate_and_write(group[0])
                        continue
                    served = lm.vrh_pack(headsets, [cfg.mode for cfg in group], means=means)
                    with engine.inputs_once(lm, self.budget) if fast else contextlib.nullcontext(), \
                            doc_subset.restrict_docs(subset_of(group[0])):
                        if fast:  # every answer of the pack first, several docs' rows per generate
                            engine.generate_ahead(served, lambda: lmms.generate(
                                lm, spec.tasks, tm, limit=spec.limit, gen_kwargs=spec.gen_kwargs, seed=spec.seed,
                                offsets=offsets), rows_limit(lm))
                        for i, cfg in enumerate(group):
                            lm.vrh_serve(i)
                            evaluate_and_write(cfg)
                    lm.vrh_unpack()
        finally:
            bar.close()
            lm.vrh_apply(HeadSet((), "none", "baseline", 0))


def earlier_configurations(spec: SweepSpec, recorded: dict[str, Any] | None, configs_dir: Path) -> list[Configuration]:
    """Configurations a resumed sweep finished in earlier runs that this run does not ask for (e.g. a k dropped from
    --k): sweep.json keeps listing them, so it never disowns results its folder holds. `recorded` is the manifest
    resumed (None: a fresh start)."""
    if not recorded:
        return []
    asked = {c.id for c in spec.configurations}
    kept = []
    for entry in recorded.get("configurations") or []:
        if (isinstance(entry, dict) and entry.get("id") not in asked
                and (configs_dir / str(entry.get("id")) / "results.json").is_file()):
            kept.append(from_dict(entry, spec.control_pool))
    return kept


def choose_pack(requested: int | None, lm, n_todo: int, batch_size: int) -> int:
    """Configurations per pack: as asked (refused where the model cannot pack), or automatically as many as
    AUTO_PACK_ROWS batch rows allow on this device, within GPU memory (1 where the model cannot pack)."""
    unsupported = lm.vrh_pack_unsupported() if hasattr(lm, "vrh_pack_unsupported") else "not a vrh_* model"
    if requested is not None:
        if requested > 1 and unsupported:
            raise VRHError(f"--pack {requested}: {unsupported}; use --pack 1")
        return requested
    if unsupported:
        return 1
    model = getattr(lm, "model", None)
    device = getattr(model, "device", None)
    on_cuda = getattr(device, "type", "cpu") == "cuda"
    rows = AUTO_PACK_ROWS["cuda" if on_cuda else "cpu"]
    if on_cuda:
        # deferred: keeps `vrh-lmms demo --help` free of torch
        import torch

        free, _ = torch.cuda.mem_get_info(device)
        per_row = kv_bytes_per_token(lm.vrh_decoder.geometry, model.dtype) * KV_TOKENS_PER_ROW
        rows = min(rows, int(0.5 * free // per_row))
    return max(1, min(n_todo, rows // max(1, batch_size)))


def rows_limit(lm) -> Callable[[int], int]:
    """How many batch rows (docs x configurations) one generate of the fast engine may carry, for rows of `tokens`
    tokens (prompt + answer): on CPU STACKED_ROWS_CPU; on CUDA as many as half the free memory holds, each row's KV
    cache counted twice (the prefill's activations are of its size)."""
    model = getattr(lm, "model", None)
    device = getattr(model, "device", None)
    if getattr(device, "type", "cpu") != "cuda":
        return lambda tokens: STACKED_ROWS_CPU
    # deferred: keeps `vrh-lmms demo --help` free of torch
    import torch

    free, _ = torch.cuda.mem_get_info(device)
    per_token = kv_bytes_per_token(lm.vrh_decoder.geometry, model.dtype)
    return lambda tokens: max(1, int(0.5 * free // (2 * per_token * max(1, tokens))))


def kv_bytes_per_token(geometry, dtype) -> int:
    """KV cache bytes one row adds per token: keys and values of every layer with heads, at its own KV-head count
    and head width (a hybrid decoder's linear-attention layers keep a state of fixed size, not one per token)."""
    # deferred: keeps `vrh-lmms demo --help` free of torch
    import torch

    itemsize = torch.empty((), dtype=dtype).element_size()
    return sum(2 * geometry.kv(layer) * geometry.dim(layer) for layer in geometry.attention_layers) * itemsize


def _progress(total: int, enabled: bool):
    return console.bar(total, "sweep", "config", enabled=enabled)
