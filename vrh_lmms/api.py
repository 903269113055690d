"""The Python API for notebooks: `load`, `discover`, `ablate`, `evaluate` (docs/api.md).

Each call is the command line's own code: `load` builds the `vrh_*` lmms-eval model
(`vrh_lmms.harness.lmms.build_model`), `discover` runs `vrh-lmms discover`'s `run_discovery`, `ablate` is
`vrh_lmms.model.ablation.ablated` on the model's decoder, `evaluate` is lmms-eval's simple_evaluate through
`vrh_lmms.harness.lmms.evaluate` with the head set applied as a sweep applies it, its run folder written as a sweep
writes one, and `Result.drop_vs` pairs two runs and computes the drop with the reports' statistics
(`vrh_lmms.report.pairing`, `vrh_lmms.base.stats.paired_drop`).

Nothing is silently wrong in a notebook either: one call at a time uses a model (`evaluate` or `discover` inside an
active `ablate` block, a second `ablate` before the first has ended, as notebook cells or threads can do, are
refused in one line, so a head is never left ablated nor an ablated model recorded as intact); a named output takes
the command line's lock (vrh_lmms.base.folder_lock); `evaluate` checks its output before generating and leaves the
global random generators and lmms-eval's patches as it found them; a temporary output is never registered.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import threading
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vrh_lmms.base import atomic, console, folder_lock
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import HeadRef, parse_head
from vrh_lmms.base.heads.heads_file import HeadsFile, load_heads_file
from vrh_lmms.base.heads.spec import HeadSet, resolve_spec
from vrh_lmms.base.pretrained import check_pretrained
from vrh_lmms.base.runfolder.samples import read_samples
from vrh_lmms.base.stats import paired_drop
from vrh_lmms.harness import lmms
from vrh_lmms.harness.preload import GENERIC_MODEL, HEAD_ARGS, model_for_checkpoint  # noqa: F401  (GENERIC_MODEL: callers)
from vrh_lmms.model.ablation import ablated
from vrh_lmms.model_wrappers import results_hook
from vrh_lmms.report.pairing import align, pair
from vrh_lmms.runs.discovery.run import DiscoverySpec, run_discovery

Heads = HeadSet | Iterable[HeadRef | str] | None


@dataclass
class Model:
    """A loaded `vrh_*` model: `lm` is the lmms-eval model, `hf` the Hugging Face model inside it."""

    lm: Any
    name: str  # the lmms-eval model name, e.g. vrh_qwen25
    model_args: str

    @property
    def hf(self) -> Any:
        return self.lm.model

    @property
    def geometry(self):
        return self.lm.vrh_decoder.geometry

    def headset(self, heads: Heads, seed: int = 0) -> HeadSet:
        """A head set from a HeadSet, head names / HeadRefs, or a spec such as "random5" (drawn from the live heads,
        as the sweeps draw controls), resolved against this model's geometry."""
        if isinstance(heads, HeadSet):
            return heads
        if heads is None or isinstance(heads, str):
            return resolve_spec(heads, self.geometry, seed=seed, dead=self.lm.vrh_dead_heads or ())
        names = [str(parse_head(h) if isinstance(h, str) else h) for h in heads]
        return resolve_spec(";".join(names) or "none", self.geometry, dead=self.lm.vrh_dead_heads or ())


def _model_name(pretrained: str) -> str:
    """The `vrh_*` model that runs `pretrained` (vrh_lmms.harness.preload.model_for_checkpoint, as the demo chooses)."""
    return model_for_checkpoint(pretrained).model_id


def load(pretrained: str, model: str | None = None, batch_size: int = 1, **model_args: Any) -> Model:
    """Load a checkpoint: "vrh-demo" (the shipped demo model, with its settings), a folder or a hub id of any
    image-text-to-text model (docs/models.md). `model` names the `vrh_*` lmms-eval model (default: the wrapper of
    the family that claims the checkpoint's model_type, else `vrh_hf`); keyword arguments are its model args
    (dtype="float32", min_pixels=..., ...)."""
    check_pretrained(pretrained)
    chosen = [k for k in model_args if k in HEAD_ARGS]
    if chosen:
        raise VRHError(f"vrh.load: {', '.join(chosen)} chooses heads; pass heads to vrh.ablate / vrh.evaluate instead")
    name = model or _model_name(str(pretrained))
    args = ",".join(f"{k}={v}" for k, v in {"pretrained": pretrained, **model_args}.items())
    with console.quiet_libraries():  # transformers' weight-loading bar and the like: not in a notebook
        return Model(lmms.build_model(name, args, batch_size=batch_size), name, args)


_IN_USE: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()  # HF model -> the call using it
_IN_USE_LOCK = threading.Lock()


@contextlib.contextmanager
def _using(model: Model, what: str, advice: str) -> Iterator[None]:
    """`what` uses the model for the block; a model another call is using (an `ablate` block not yet ended, in this
    thread or another, or an evaluation in another thread) is refused in one line, before anything changes."""
    key = model.hf
    with _IN_USE_LOCK:
        user = _IN_USE.get(key)
        if user is not None:
            raise VRHError(f"{what}: refused, the model is in use by {user}, which has not ended; {advice}")
        _IN_USE[key] = what
    try:
        yield
    finally:
        with _IN_USE_LOCK:
            _IN_USE.pop(key, None)


@contextlib.contextmanager
def _generators_kept() -> Iterator[None]:
    """lmms-eval's evaluator seeds Python's, NumPy's and torch's global generators: put their states back after."""
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    states = (random.getstate(), np.random.get_state(), torch.random.get_rng_state(),
              torch.cuda.get_rng_state_all() if cuda else None)
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.random.set_rng_state(states[2])
        if states[3] is not None:
            torch.cuda.set_rng_state_all(states[3])


@contextlib.contextmanager
def _as_found() -> Iterator[None]:
    """The global generators and lmms-eval's tracker wrap (results_hook) as they were before the block."""
    with _generators_kept(), results_hook.kept():
        yield


def _output_lock(output: Path | None, command: str, wait: bool):
    """The command line's lock of a named output (a temporary one needs none)."""
    if output is None:
        return contextlib.nullcontext()
    return folder_lock.held(output, command, wait=wait, wait_option="wait=True")


@dataclass
class Discovered:
    """What `discover` found: `ranking` (head names, best first), `top(k)` (a head set), `save(path)`."""

    file: HeadsFile
    geometry: Any = field(repr=False)

    @property
    def ranking(self) -> list[str]:
        return [str(h) for h in self.file.ranking]

    @property
    def path(self) -> Path:
        return Path(self.file.path)

    def top(self, k: int) -> HeadSet:
        return resolve_spec(f"top{k}", self.geometry, heads_file=self.file)

    def save(self, path: str | Path) -> Path:
        """Copy the heads file (every head's score; `vrh-lmms heads` reads it, `heads_file=` uses it)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.path, path)
        return path


def discover(model: Model, task: str, limit: int | None = 200, output: str | Path | None = None,
             wait: bool = False, **options: Any) -> Discovered:
    """`vrh-lmms discover` on one task (its default scoring, out,sum,mean); `options` are DiscoverySpec fields
    (primary=, cells=, key_tokens=, gen_kwargs=, ...). `output`: the heads file, locked and registered as the
    command does (default: a new temporary folder, not registered); `wait`: wait for a run holding it to end."""
    named = Path(output) if output else None
    out = named or atomic.scratch_dir("vrh-discover-") / "heads.json"
    spec = DiscoverySpec(model=model.name, model_args=model.model_args, tasks=[task], output=str(out),
                         limit=limit, **options)
    with _using(model, f"vrh.discover({task})", "discover outside the vrh.ablate block (it scores the intact "
                "model)"), _output_lock(named, "vrh.discover", wait), _as_found():
        with console.quiet_libraries(), _one_bar(model.lm, f"discover {task}", limit):
            path = run_discovery(spec, lm=model.lm, register=named is not None)
    return Discovered(load_heads_file(path), model.geometry)


@contextlib.contextmanager
def _one_bar(lm: Any, desc: str, total: int | None) -> Iterator[None]:
    """One progress bar for a library call (console.quiet_libraries holds the libraries' own back): each answer moves
    it, counted at lmms-eval's cache hook, which every backend calls once per answer."""
    hook = lm.cache_hook
    bar = console.bar(total, desc, "doc")
    add = hook.add_partial

    def counted(*args: Any, **kwargs: Any) -> Any:
        bar.update(1)
        return add(*args, **kwargs)

    hook.add_partial = counted
    try:
        yield
    finally:
        del hook.add_partial  # the class's own again
        bar.close()


@contextlib.contextmanager
def ablate(model: Model, heads: Heads, mode: str = "zero") -> Iterator[HeadSet]:
    """Ablate `heads` in the Hugging Face model for the block (any forward or generate); the weights and hooks come
    back exactly when it ends, also after an exception. One block at a time per model: a second one before the
    first has ended (nested, notebook cells exited out of order, another thread) is refused in one line."""
    headset = model.headset(heads)
    with _using(model, f"vrh.ablate({', '.join(headset.names) or 'no heads'})",
                "end that block first (or ablate every head in one block)"):
        with ablated(model.hf, headset, mode=mode, decoder=model.lm.vrh_decoder):
            yield headset


@dataclass
class Drop:
    """A paired drop in points (baseline minus this run, per doc) with its cluster-aware 95% interval."""

    points: float
    ci: tuple[float, float]
    method: str
    n: int
    n_clusters: int
    stats: Any = field(repr=False)  # vrh_lmms.base.stats.DropResult, in fractions

    def __str__(self) -> str:
        return f"{self.points:.1f} points [{self.ci[0]:.1f}, {self.ci[1]:.1f}] (n = {self.n}, {self.n_clusters} images)"


@dataclass
class Result:
    """One evaluation: lmms-eval's aggregated `metrics` (acc50, iou, ...), its logged `samples`, the run `folder`."""

    task: str
    metrics: dict[str, Any]
    samples: list[dict[str, Any]]
    folder: Path
    heads: list[str]

    def table(self):
        return read_samples(self.folder / f"samples_{self.task}.jsonl")

    def drop_vs(self, other: Result, alpha: float = 0.05, n_resamples: int = 10_000, seed: int = 0) -> Drop:
        """How many points this run lost against `other` (its baseline) on their shared docs, clustered by image."""
        _, (base, mine) = align(f"task {self.task}", ["other", "this"], [other.table(), self.table()], 0, False)
        paired = pair(base, mine)
        d = paired_drop(paired.baseline, paired.other, paired.clusters, alpha=alpha, n_resamples=n_resamples,
                        seed=seed)
        return Drop(100 * d.drop, (100 * d.ci_low, 100 * d.ci_high), d.method, d.n_pairs, d.n_clusters, d)


def evaluate(model: Model, task: str, heads: Heads = None, limit: int | None = None, mode: str = "zero",
             gen_kwargs: str | None = None, output: str | Path | None = None, batch_size: int | None = None,
             wait: bool = False) -> Result:
    """lmms-eval's evaluation of `task` with `heads` ablated (None: the intact model), as a sweep runs one
    configuration; the model is intact again afterwards. `output`: the run folder, a new one, locked while it is
    written (default: a temporary one); `batch_size`: docs per generate call for this evaluation (default: the
    model's, 1 unless `load` said); `wait`: wait for a run holding `output` to end."""
    lm = model.lm
    headset = model.headset(heads)
    named = Path(output) if output else None
    with _using(model, f"vrh.evaluate({task})", "evaluate after the block ends, with heads= for the heads to "
                "ablate"), _output_lock(named, "vrh.evaluate", wait):
        if named is not None and (named.exists() or named.is_symlink()):
            raise VRHError(f"{named} exists already; refusing to overwrite it (name a new folder)")
        tm = lmms.task_manager(model.name, tasks=[task])
        lmms.check_tasks(tm, [task])
        out = named or atomic.scratch_dir("vrh-evaluate-") / "run"
        with _as_found():
            results, record = _evaluate(lm, task, tm, headset, mode, limit, gen_kwargs, batch_size)
        lmms.write_run(out, results, record)
    metrics = {key.split(",")[0]: value for key, value in results["results"][task].items()
               if "," in key and "_stderr" not in key and isinstance(value, (int, float))}
    return Result(task, metrics, list(results["samples"][task]), out, headset.names)


def _evaluate(lm, task: str, tm, headset: HeadSet, mode: str, limit: int | None, gen_kwargs: str | None,
              batch_size: int | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The evaluation with `headset` applied through the model's own ablator; its heads, mode and batch size are
    put back after, also on an exception."""
    before = lm.vrh_headset
    before_mode = lm.vrh_mode if before.heads else "zero"
    batch = lm.batch_size_per_gpu
    lm.vrh_apply(headset, mode=mode)
    try:
        lm.batch_size_per_gpu = batch_size or batch  # as the demo's sweeps batch their docs
        with console.quiet_libraries(), _one_bar(lm, f"evaluate {task}", limit):
            results = lmms.evaluate(lm, [task], tm, limit=limit, gen_kwargs=gen_kwargs)
        return results, lm.vrh_record()
    finally:
        lm.batch_size_per_gpu = batch
        lm.vrh_apply(before, mode=before_mode)
