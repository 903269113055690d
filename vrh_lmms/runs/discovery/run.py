"""`vrh-lmms discover`: run a grounding task through lmms-eval, capture each answer's attention, write a heads file.

Outputs beside `heads.json`:
  heads.parts/            one part per doc (resumable; a rerun skips finished docs and replays their answers)
  heads.eval/             the evaluation of the discovery set (lmms-eval results JSON + samples)
  heads.samples.npz       per-sample head statistics (for `vrh-lmms sample-efficiency`)
  heads.means.safetensors per-head mean outputs over the discovery set (for `ablation=mean`)
"""

from __future__ import annotations

import datetime as _dt
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vrh_lmms import __version__
from vrh_lmms.base import console, owned
from vrh_lmms.base.data_env import data_env
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import registry
from vrh_lmms.base.heads.geometry import HeadRef, head_name
from vrh_lmms.base.heads.heads_file import HeadsFile, save_heads_file
from vrh_lmms.base.runfile import run_file_path
from vrh_lmms.harness import distributed, lmms
from vrh_lmms.model.ablation import means_path_for, padded_means, save_means
from vrh_lmms.runs.discovery.controls import corrected_stats, heads_file_extras
from vrh_lmms.runs.discovery.evidence import get_kind
from vrh_lmms.runs.discovery.interceptor import DocTracker, GenerateInterceptor, parse_key
from vrh_lmms.runs.discovery.scoring import (
    LOCALIZATION,
    PRESETS,
    all_cells,
    default_freq_top_k,
    parse_cell,
    parse_cells,
    presets_for,
    rank,
    score_all,
)
from vrh_lmms.runs.discovery.store import PartStore
from vrh_lmms.runs.preflight import Checks, every_doc, preflight
from vrh_lmms.runs.runner import Job, Manifest, Runner
from vrh_lmms.tasks.common.task_sources import chosen_sources, source_record

IDENTITY = "identity.json"
# Version of what a part holds: 2 added the out_random1 / in+out query sets and the Localization Heads statistics,
# so parts written before (without them) belong to another discovery.
STATS_VERSION = 2


@dataclass
class DiscoverySpec:
    model: str
    model_args: str
    tasks: list[str]
    output: str
    limit: int | float | None = 200
    cells: list[str] = field(default_factory=list)
    primary: str = "out,sum,mean"
    freq_top_k: int | None = None
    collect_means: bool = True
    gen_kwargs: str | None = None
    seed: int = 0
    null_query: bool = False  # subtract each head's score on the content-free query (discovery/controls.py)
    # GT box -> key tokens (vrh_lmms.model.capture.layouts.RULES): `overlap` = at least half a cell inside the box
    # (centre
    # cell as fallback), the default; `any` = every token whose cell overlaps the box, the paper's rule; `center`.
    key_tokens: str = "overlap"

    def identity(self) -> dict[str, Any]:
        out = {"model": self.model, "model_args": self.model_args, "tasks": self.tasks, "limit": self.limit,
               "gen_kwargs": self.gen_kwargs, "seed": self.seed, "stats": STATS_VERSION}
        out |= {"key_tokens": self.key_tokens} if self.key_tokens != "overlap" else {}
        out |= {"data": data} if (data := data_env()) else {}  # answers on other data are never replayed
        out |= {"sources": {t: source_record(s) for t, s in chosen.items()}} if (chosen := chosen_sources(self.tasks)) \
            else {}  # the data used, as resolved (local files, another hub id), where not the default
        return out | ({"null_query": True} if self.null_query else {})


def sidecars(output: str | Path) -> dict[str, Path]:
    out = Path(output)
    stem = out.with_suffix("") if out.suffix == ".json" else out
    return {"parts": Path(f"{stem}.parts"), "eval": Path(f"{stem}.eval"), "samples": Path(f"{stem}.samples.npz"),
            "means": means_path_for(out), "run": run_file_path(out, beside=True), "log": Path(f"{stem}.log")}


HEADS_FILE = owned.json_with("schema", "geometry", schema_prefix="vrh-heads/")
PARTS_LAYOUT: dict[str, owned.Check | None] = {IDENTITY: owned.json_with(), "*.npz": owned.is_file}
# Each output beside the heads file, and how to tell that vrh-lmms wrote it.
SIDECAR_CHECKS: dict[str, owned.Check] = {
    "parts": owned.folder_of(PARTS_LAYOUT),
    "eval": owned.RUN_FOLDER,
    "samples": owned.npz_with("keys"),
    "means": owned.safetensors_with("means"),
    "run": owned.is_file,  # the run file a finished `vrh-lmms discover` writes (vrh_lmms.base.runfile)
    "log": owned.log_file,  # the libraries' output of `vrh-lmms discover` (vrh_lmms.base.console)
}


def discovery_layout(output: str | Path) -> dict[str, owned.Check | None]:
    """Names (in the heads file's folder) of everything one discovery writes, with their ownership checks."""
    paths = sidecars(output)
    name = Path(output).name
    layout: dict[str, owned.Check | None] = {name: HEADS_FILE, f".{name}.*": owned.is_file,
                                              f".{paths['eval'].name}.*": owned.RUN_FOLDER,
                                              f".{paths['samples'].name}.*": owned.is_file,
                                              f".{paths['means'].name}.*": owned.is_file,
                                              f".{paths['run'].name}.*": owned.is_file}
    layout.update({paths[key].name: check for key, check in SIDECAR_CHECKS.items()})
    return layout


def is_part(path: Path) -> bool:
    """A finished doc of the parts folder (its temporary is `.name.*`)."""
    return path.suffix == ".npz" and path.is_file()


def parts_job(spec: DiscoverySpec) -> Job:
    """The parts folder as the runner's job (vrh_lmms.runs.runner): its identity is `identity.json` itself; a
    different discovery's finished parts are refused unless force, one that finished none is replaced. Its units,
    the docs, are run and skipped by the collector as lmms-eval reaches them (vrh_lmms.runs.discovery.store)."""
    parts = sidecars(spec.output)["parts"]
    return Job(out=parts, layout=PARTS_LAYOUT, manifest=Manifest(parts / IDENTITY, key=None),
               identity=spec.identity(), units_dir=parts, complete=is_part, what="discovery", unit="part",
               replace_unfinished=True, units_key=None)


def _check_outputs(spec: DiscoverySpec, force: bool) -> Job:
    """Refuse what must be refused, change nothing: files vrh-lmms did not write (always), a finished heads file
    (unless force); returns the parts folder's job, whose runner refuses finished parts of a different discovery
    (unless force)."""
    out = Path(spec.output)
    paths = sidecars(out)
    for key, check in SIDECAR_CHECKS.items():
        path = paths[key]
        if (path.exists() or path.is_symlink()) and not check(path):
            if key == "parts" and path.is_dir() and not path.is_symlink():
                owned.refuse_foreign(path, owned.foreign_entries(path, PARTS_LAYOUT))
            raise VRHError(f"{path} exists and was not written by vrh-lmms discover; nothing was changed: choose "
                           f"another --output, or move it away yourself")
    owned.prepare_file(out, HEADS_FILE, force=True, what="a heads file")  # refuses only a file we did not write
    if out.exists() and not force:
        raise VRHError(f"{out} exists; choose another --output or pass --force to replace it")
    return parts_job(spec)


def _claim(spec: DiscoverySpec, runner: Runner, force: bool) -> dict[str, Path]:
    """Take the parts folder (the runner: reset for another discovery, its identity recorded) and, with force, clear
    our other earlier outputs (rank 0)."""
    paths = sidecars(spec.output)
    runner.claim()
    if force and distributed.is_main():
        for key in ("eval", "samples", "means", "run", "log"):
            owned.remove(paths[key])
    return paths


def discovery_checks(spec: DiscoverySpec, force: bool) -> Checks:
    """Discovery's checks, declared for the corridor (vrh_lmms.runs.preflight.preflight runs them before the model
    loads, writing nothing): its settings, the tasks, the model args, the output folder and its sidecars (`force`:
    what --force may remove), every doc's evidence, the checkpoint's config.json."""

    def settings() -> None:
        if spec.limit is not None and spec.limit <= 0:
            raise VRHError(f"--limit must be positive (or -1 for all docs), got {spec.limit}")
        if spec.freq_top_k is not None and spec.freq_top_k < 1:
            raise VRHError(f"--freq-top-k must be at least 1, got {spec.freq_top_k}")
        # deferred: keeps `vrh-lmms discover --help` free of transformers
        from vrh_lmms.model.capture.layouts import RULES

        if spec.key_tokens not in RULES:
            raise VRHError(f"--key-tokens {spec.key_tokens!r}: use one of {', '.join(RULES)}")

    def batch_size_one(plan) -> None:
        if str(plan.args.get("batch_size", 1)) != "1":
            raise VRHError(f"model arg batch_size={plan.args['batch_size']}: discovery runs with batch_size 1")

    intact = "discovery scores the intact model, so no model arg may choose heads to ablate"
    return Checks("discover", spec.model, spec.model_args, list(spec.tasks), head_args=intact, settings=settings,
                  with_model_plan=batch_size_one, job=lambda ready: _check_outputs(spec, force),
                  docs=every_doc(spec.limit))


def run_discovery(spec: DiscoverySpec, force: bool = False, lm=None, register: bool = True) -> Path | None:
    """Returns the heads file path (None on non-zero ranks). On several ranks every rank checks, rank 0 alone
    claims the folder and merges the parts every rank wrote (vrh_lmms.harness.distributed). `register`: record the
    heads file in the heads registry (the Python API's temporary outputs are not)."""
    cells = parse_cells("+".join(spec.cells)) if spec.cells else all_cells()
    primary = parse_cells(spec.primary)[0]
    if primary not in cells:
        cells = [primary, *cells]
    distributed.ensure_group()
    ready = preflight(discovery_checks(spec, force), force, lm=lm)  # nothing is written before every check passed
    tm, runner = ready.task_manager, ready.runner
    # deferred: keeps `vrh-lmms discover --help` free of transformers, scipy
    from vrh_lmms.runs.discovery.collector import SampleCollector  # imports transformers: only once checks passed

    if lm is not None and lm.vrh_headset.heads:
        raise VRHError(f"discovery scores the intact model, but model_args ablate {lm.vrh_headset.spec}; drop heads=")
    paths = _claim(spec, runner, force)
    distributed.barrier()
    console.log_to(paths["log"])
    lm = runner.model(lambda: lmms.build_model(spec.model, spec.model_args, batch_size=1))
    if getattr(lm, "batch_size", 1) != 1:
        raise VRHError("discovery runs with batch_size 1")
    store = PartStore(paths["parts"])
    tracker = DocTracker(lm.task_dict)
    lm.task_dict = tracker
    collector = SampleCollector(lm, store, collect_means=spec.collect_means, null_query=spec.null_query,
                                key_tokens=spec.key_tokens, localization=LOCALIZATION in cells)
    interceptor = GenerateInterceptor(lm.model, tracker, collector, lambda ctx: store.cached_answer(ctx.key))
    try:
        results = lmms.evaluate(lm, spec.tasks, tm, limit=spec.limit, gen_kwargs=spec.gen_kwargs, seed=spec.seed)
    finally:
        interceptor.uninstall()
        lm.task_dict = dict(tracker)
    if interceptor.error is not None:  # a backend that swallowed it would end in "no doc produced statistics"
        raise interceptor.error
    distributed.barrier()  # every rank's parts are written
    if not distributed.is_main() or results is None:
        return None
    out = _finish(spec, lm, results, store, paths, cells, primary)
    if register:
        _register(str(lm.vrh_pretrained), spec.tasks, spec.output)
    return out


def _evaluated_keys(results: dict[str, Any], store) -> list[str]:
    """Parts of exactly the docs this evaluation covered, in task then doc order."""
    wanted = {(task, int(row["doc_id"])) for task, rows in (results.get("samples") or {}).items() for row in rows}
    keys = [k for k in store.keys() if parse_key(k)[::2] in wanted]
    return sorted(keys, key=lambda k: parse_key(k)[::2])


def discovery_docs_block(keys: list[str]) -> dict[str, dict[str, Any]]:
    """Heads-file field `discovery_docs`: per task, the split and doc ids the heads were found on, so a sweep can
    leave them out (`vrh-lmms sweep --exclude-discovery-docs`, vrh_lmms.runs.sweep.exclusion)."""
    out: dict[str, dict[str, Any]] = {}
    for key in keys:
        task, split, doc_id = parse_key(key)
        out.setdefault(task, {"split": split, "doc_ids": []})["doc_ids"].append(doc_id)
    for entry in out.values():
        entry["doc_ids"].sort()
    return out


def dead_heads_block(dead, ranking) -> dict[str, Any]:
    """Heads-file field `dead_heads`: the heads that write nothing (o_proj columns all zero), and where the ranking
    puts them, so a top-k that holds one says so (controls draw from the other, live heads)."""
    if dead is None:
        return {"dead_heads": {"heads": None, "rule": "o_proj weights could not be read; not checked"}}
    names = [str(h) for h in dead]
    order = [head_name(l, h) for l, h in ranking]
    ranks = {n: order.index(n) + 1 for n in names if n in order}
    first = min(ranks.values(), default=None)
    return {"dead_heads": {"heads": names, "rule": "o_proj input columns of the head all exactly zero",
                           "ranks": ranks, "best_rank": first}}


def _finish(spec: DiscoverySpec, lm, results, store, paths, cells, primary) -> Path:
    keys = _evaluated_keys(results, store)
    if not keys:
        raise VRHError("no doc produced attention statistics; is the task a grounding task with images?")
    parts = [store.read(k) for k in keys]
    geometry = lm.vrh_decoder.geometry
    freq_k = spec.freq_top_k or default_freq_top_k(geometry.total_heads)
    stats = [p.stats for p in parts]
    if spec.null_query:  # score what the expression adds over the content-free query
        stats = corrected_stats(stats)
    evidence = sorted({p.meta.get("evidence", "box") for p in parts})
    skipped = {}
    gridless = [e for e in evidence if not get_kind(e).grid]  # Localization Heads needs one image's token grid
    if gridless and LOCALIZATION in cells:
        if primary == LOCALIZATION:
            raise VRHError(f"the primary cell {LOCALIZATION} needs box evidence; these docs carry "
                           f"{', '.join(evidence)} evidence")
        cells = [c for c in cells if c != LOCALIZATION]
        skipped[LOCALIZATION] = f"skipped: {', '.join(gridless)} evidence has no image token grid"
    scored = score_all(stats, cells, freq_k)
    cell_block = {c: {"scores": np.nan_to_num(s, nan=0.0).round(8).tolist(),
                      "ranking": [head_name(l, h) for l, h in rank(s, geometry)]} for c, s in scored.items()}
    parsed = parse_cell(primary)
    q, k, a = (primary, primary, "mean") if isinstance(parsed, str) else (parsed.query, parsed.key, parsed.aggregate)
    if parsed == LOCALIZATION:
        q, k, a = "last_input", "spatial_entropy", "freq"
    baseline = {}
    for task in spec.tasks:
        res = (results.get("results") or {}).get(task, {})
        if "acc50,none" in res:
            baseline[task] = {"acc50": res["acc50,none"], "n": len((results.get("samples") or {}).get(task, []))}
    scoring = {"query": q, "key": k, "aggregate": a, "cell": primary, "task": ",".join(spec.tasks),
               "n_samples": len(parts), "limit": spec.limit, "freq_top_k": freq_k, "box_rule": spec.key_tokens,
               "key_tokens": spec.key_tokens,
               "model_args": spec.model_args, "model": spec.model, "gen_kwargs": spec.gen_kwargs,
               "command": " ".join(["vrh-lmms", *sys.argv[1:]]) if sys.argv else None,
               "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "version": __version__,
               "samples_file": paths["samples"].name,
               "samples_without_box_tokens": sum(1 for p in parts if p.meta.get("n_box_tokens", 0) == 0),
               "evidence": ",".join(evidence)}
    scoring |= {"skipped_cells": skipped} if skipped else {}
    scoring |= {"preset": spec.primary} if spec.primary in PRESETS else {}
    primary_scores = np.nan_to_num(scored[primary], nan=0.0)
    hf = HeadsFile(model={"id": str(lm.vrh_pretrained), "family": lm.vrh_family},
                   geometry=geometry, scores=primary_scores,
                   ranking=[HeadRef(l, h) for l, h in rank(scored[primary], geometry)],
                   scoring=scoring, cells=cell_block, baseline=baseline or None,
                   extra={"presets": presets_for(cell_block), "discovery_docs": discovery_docs_block(keys)}
                   | heads_file_extras(parts, primary_scores, primary, spec.null_query)
                   | dead_heads_block(getattr(lm, "vrh_dead_heads", None), rank(scored[primary], geometry)))
    # Side outputs first, the heads file last: its presence means the run is complete.
    common = [name for name in parts[0].stats if all(name in p.stats for p in parts)]
    np.savez_compressed(paths["samples"], keys=np.array(keys),
                        **{name: np.stack([p.stats[name] for p in parts]) for name in common})
    if spec.collect_means and all(p.head_sums is not None for p in parts):
        sums = np.sum([p.head_sums.astype(np.float64) for p in parts], axis=0)
        tokens = sum(p.tokens for p in parts)
        means = padded_means(torch.from_numpy((sums / max(tokens, 1)).astype(np.float32)), geometry)
        save_means(means, paths["means"], geometry, tokens)
    if paths["eval"].exists():
        owned.remove(paths["eval"])  # checked to be ours before the run
    lmms.write_run(paths["eval"], results, lm.vrh_record(config={"id": "discovery", "kind": "baseline", "k": 0,
                                                                  "seed": None}))
    save_heads_file(hf, spec.output, force=True)
    return Path(spec.output)


def _register(pretrained: str, tasks: list[str], output: str) -> None:
    """Remember the heads file for this checkpoint and task (vrh_lmms.base.heads.registry), so `heads=top20` finds it;
    a registry that cannot be written costs a warning, not the discovery."""
    try:
        registry.register(pretrained, tasks, output)
    except (OSError, VRHError) as exc:
        print(f"vrh-lmms: warning: heads file not registered ({exc})", file=sys.stderr)
