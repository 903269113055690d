"""`vrh-lmms patch`: activation patching of every head on pairs of expressions naming two objects of one image.

1. The grounding task is evaluated once through lmms-eval on the intact model; the backend's own generate inputs
   and the model's answer are stored per doc (`inputs/`; docs whose image holds no other object keep only their
   answer). A rerun replays stored answers instead of generating again.
2. Pairs (A, B): docs of one image naming different objects (IoU < 0.5), both answered correctly (vrh_record
   `correct`; `--pairs all`: any non-empty answers), `--pairs-per-image` per image, `--max-pairs` in all
   (vrh_lmms.runs.interventions.pairs). The teacher-forced answers are the model's own (default) or, with
   `--answers reference`, the ground-truth boxes written in the task's box convention. Pairs whose
   LD_clean - LD_corrupt is not above `--min-gap` are left out of the averages (identical answers give 0).
3. Per pair: every head (and every head set: top-k, random-k, layer-matched random-k of the heads file) is patched
   on the answer rows (vrh_lmms.model.interventions.patching), one part file per pair (`parts/`, resumable).
4. `patch.json` (written last: the run is complete when it exists): the per-head effect map (recovery when
   denoising, the share destroyed with `--direction noise`), the head sets, the rank correlation of the map with
   discovery's scores; `report.md` and `patch_map.png`. Control sets are drawn from live heads by default
   (`--control-pool`); sets that cannot be drawn are listed under `unavailable_sets`.

A rerun of the same run resumes; a different run is refused unless --force, which removes the files of
PATCH_LAYOUT (anything else in the folder is always refused). Everything that needs no forward pass is checked
before the model loads (vrh_lmms.runs.interventions.folder.intervention_checks).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.stats import kendalltau, spearmanr

from vrh_lmms.base import atomic, console
from vrh_lmms.base.boxes import context
from vrh_lmms.base.console import LOG_NAME
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import head_name
from vrh_lmms.base.heads.kinds import DEFAULT_POOL
from vrh_lmms.base.heads.plan import HeadSets, plan_configurations
from vrh_lmms.base.heads.spec import ControlUnavailable
from vrh_lmms.base.stats import cluster_ci
from vrh_lmms.harness import distributed, lmms
from vrh_lmms.harness.preload import parse_model_args
from vrh_lmms.model.interventions.patching import DIRECTIONS, MEASURES, PairResult, patch_pair
from vrh_lmms.runs.checks import chosen_data, dead_head_names, dead_heads_of, sha256_of
from vrh_lmms.runs.discovery.interceptor import DocContext, DocTracker, GenerateInterceptor
from vrh_lmms.runs.discovery.queries import answer_length
from vrh_lmms.runs.dpo import format_ground_truth_box
from vrh_lmms.runs.interventions.folder import intervention_checks
from vrh_lmms.runs.interventions.outputs import PATCH_LAYOUT  # noqa: F401  (the patching folder's names, for callers)
from vrh_lmms.runs.interventions.outputs import PATCH_MANIFEST as MANIFEST
from vrh_lmms.runs.interventions.outputs import PATCH_RESULT as RESULT
from vrh_lmms.runs.interventions.outputs import PATCH_SCHEMA as SCHEMA
from vrh_lmms.runs.interventions.pairs import ObjectIndex, split_targets
from vrh_lmms.runs.preflight import preflight
from vrh_lmms.runs.runner import Job, Manifest, is_published_file

METRIC = "(LD_patched - LD_corrupt) / (LD_clean - LD_corrupt), LD = log p(answer_A) - log p(answer_B)"


@dataclass
class PatchSpec:
    model: str
    model_args: str
    tasks: list[str]
    heads_file: str
    ks: list[int] = field(default_factory=lambda: [5, 10])
    random_seeds: int = 3
    layer_matched: bool = True
    limit: int | float | None = None
    gen_kwargs: str | None = None
    seed: int = 0
    per_image: int = 2
    max_pairs: int | None = 50
    direction: str = "denoise"
    min_gap: float = 1.0
    allow_cross_model: bool = False
    control_pool: str = DEFAULT_POOL  # what control head sets are drawn from (vrh_lmms.base.heads.kinds.POOLS)
    controls: tuple[str, ...] = ()
    control_tolerance: float | None = None
    patch_batch: int = 8  # patched copies per forward (rows of one batch)
    pairs: str = "correct"  # which docs may form pairs: "correct" (both answered right) or "all" answered docs
    answers: str = "model"  # teacher-forced answers: the model's own ("model") or the ground truth ("reference")

    def identity(self) -> dict[str, Any]:
        return {"model": self.model, "model_args": self.model_args, "tasks": self.tasks,
                "heads_file_sha256": sha256_of(self.heads_file), "limit": self.limit, "gen_kwargs": self.gen_kwargs,
                "seed": self.seed, "per_image": self.per_image, "max_pairs": self.max_pairs,
                "direction": self.direction, "ks": sorted(self.ks), "random_seeds": self.random_seeds,
                "layer_matched": self.layer_matched, "controls": list(self.controls),
                "control_tolerance": self.control_tolerance, "pairs": self.pairs,
                "answers": self.answers, "control_pool": self.control_pool} | chosen_data(self.tasks)


class InputStore:
    """One file per doc: the generate inputs (CPU tensors; only for docs that can be paired) and the answer."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        return self.root / ("".join(c if c.isalnum() or c in "._-" else "_" for c in key) + ".pt")

    def has(self, key: str) -> bool:
        return self.path(key).is_file()

    def write(self, key: str, tensors: dict[str, torch.Tensor] | None, answer: torch.Tensor, with_prompt: bool,
              ) -> None:
        data = {"tensors": None if tensors is None else {k: v.detach().cpu() for k, v in tensors.items()},
                "answer": answer.detach().cpu(), "with_prompt": with_prompt}
        with atomic.atomic_file(self.path(key), suffix=".pt") as tmp:
            torch.save(data, tmp)

    def read(self, key: str) -> dict[str, Any]:
        return torch.load(self.path(key), weights_only=True)

    def cached_answer(self, ctx: DocContext):
        if not self.has(ctx.key):
            return None
        data = self.read(ctx.key)
        return data["answer"], bool(data["with_prompt"])


class _Recorder:
    def __init__(self, store: InputStore, tracker: DocTracker) -> None:
        self.store, self.tracker = store, tracker
        self.indexes: dict[tuple[str, str], ObjectIndex] = {}

    def index(self, task: str, split: str) -> ObjectIndex:
        if (task, split) not in self.indexes:
            docs = dict.__getitem__(self.tracker, task)[split]
            self.indexes[(task, split)] = ObjectIndex(split_targets(docs, where=task))
        return self.indexes[(task, split)]

    def cached_answer(self, ctx: DocContext):
        """Replays a stored answer (and notes the doc's task split, which pairing needs)."""
        self.index(ctx.task, ctx.split)
        return self.store.cached_answer(ctx)

    def __call__(self, ctx: DocContext, tensors, continuation, with_prompt) -> None:
        pairable = bool(self.index(ctx.task, ctx.split).others(ctx.doc_id))
        self.store.write(ctx.key, tensors if pairable else None, continuation, with_prompt)


def reference_answer(tokenizer, record: dict[str, Any], where: str) -> torch.Tensor:
    """The ground-truth box written in the box convention the task used (vrh_lmms.runs.dpo.format_ground_truth_box,
    with the active resize parameters), as token ids."""
    name = record.get("convention")
    if not name or "gt_box" not in record or "image_size" not in record:
        raise VRHError(f"{where}: its vrh_record lacks convention, gt_box or image_size; use --answers model")
    active = context.get_active()
    params = dict(active.params) if active is not None and active.name == name else None
    text = format_ground_truth_box(name, record["gt_box"], record["image_size"], record.get("expression") or "",
                                   params)
    return torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long)


def set_configurations(spec: PatchSpec) -> list:
    """The head sets patched together, as sweep configurations (their ids name the sets)."""
    return [c for c in plan_configurations(spec.ks, spec.random_seeds, spec.layer_matched, ["zero"],
                                           controls=spec.controls, control_tolerance=spec.control_tolerance,
                                           pool=spec.control_pool)
            if c.kind != "baseline"]


def head_sets(spec: PatchSpec, hf, geometry, dead: tuple = (), headsets: HeadSets | None = None
              ) -> tuple[dict[str, dict], dict[str, str]]:
    """Named head sets (sweep configuration ids) patched together, controls drawn from the pool each carries with
    the model's `dead` heads; and the sets that cannot be drawn there, with the reason. `headsets`: the ones the
    checks resolved (vrh_lmms.runs.preflight), handed forward."""
    headsets = headsets or HeadSets(hf, spec.allow_cross_model)
    out, unavailable = {}, {}
    for c in set_configurations(spec):
        try:
            hs = headsets.get(c, geometry, dead)
        except ControlUnavailable as exc:
            unavailable[c.id] = str(exc)
            continue
        out[c.id] = {"kind": c.kind, "k": c.k, "seed": c.seed, "heads": list(hs.heads), "pool": hs.pool,
                     "dead_heads": [str(h) for h in hs.dead]}
    return out, unavailable


def _part_id(task: str, a: int, b: int) -> str:
    return f"{task}__{a}__{b}"


def patch_job(spec: PatchSpec, out: Path) -> Job:
    """Patching as the runner's job (vrh_lmms.runs.runner): its units are the pairs (one part file each, known once
    the evaluation has answered), patch.json is published last."""
    return Job(out=out, layout=PATCH_LAYOUT, manifest=Manifest(out / MANIFEST), identity=spec.identity(),
               units_dir=out / "parts", entry=lambda uid: f"{uid}.json", complete=is_published_file, unit="pair",
               units_key=None, fields=lambda: {"heads_file": spec.heads_file}, log=out / LOG_NAME,
               result=out / RESULT)


def run_patching(spec: PatchSpec, output: str | Path, force: bool = False, lm=None, progress: bool = True) -> Path:
    """Returns the path of patch.json. On several ranks the evaluation and the pairs are split across ranks, rank 0
    alone writes the evaluation and the result (vrh_lmms.harness.distributed)."""
    # deferred: keeps `vrh-lmms patch --help` free of transformers
    from vrh_lmms.runs.discovery.collector import backend_processor, stop_token_ids

    if spec.pairs not in ("correct", "all"):
        raise VRHError(f"--pairs {spec.pairs!r}: use correct or all")
    if spec.answers not in ("model", "reference"):
        raise VRHError(f"--answers {spec.answers!r}: use model or reference")
    if spec.direction not in DIRECTIONS:
        raise VRHError(f"--direction {spec.direction!r}: use one of {', '.join(DIRECTIONS)}")
    if spec.patch_batch < 1:
        raise VRHError(f"--patch-batch must be at least 1, got {spec.patch_batch}")
    if not spec.heads_file:
        raise VRHError("patching needs --heads-file (discovery's scores are compared with the recovery map)")
    if lm is None:
        if str(parse_model_args(spec.model_args).get("batch_size", 1)) != "1":
            raise VRHError("model arg batch_size: patching runs with batch_size 1 (one doc per generate call)")
    out = Path(output)
    distributed.ensure_group()
    ready = preflight(intervention_checks(spec, "patch", patch_job(spec, out), set_configurations(spec)), force,
                      lm=lm)
    hf, tm, runner = ready.heads_file, ready.task_manager, ready.runner
    runner.claim()  # nothing is written before every check has passed
    if distributed.broadcast(runner.finished):
        return out / RESULT
    lm = runner.model(lambda: lmms.build_model(spec.model, spec.model_args, batch_size=1))
    if getattr(lm, "batch_size", 1) != 1:
        raise VRHError("patching runs with batch_size 1 (one doc per generate call)")
    if lm.vrh_headset.heads:
        raise VRHError(f"patching runs on the intact model, but model_args ablate {lm.vrh_headset.spec}")
    store = InputStore(out / "inputs")
    tracker = DocTracker(lm.task_dict)
    lm.task_dict = tracker
    recorder = _Recorder(store, tracker)
    interceptor = GenerateInterceptor(lm.model, tracker, recorder, recorder.cached_answer)
    try:
        results = lmms.evaluate(lm, spec.tasks, tm, limit=spec.limit, gen_kwargs=spec.gen_kwargs, seed=spec.seed)
    finally:
        interceptor.uninstall()
        lm.task_dict = dict(tracker)
    if results is not None and not (out / "eval" / "results.json").is_file():
        lmms.write_run(out / "eval", results, lm.vrh_record(config={"id": "patch_eval", "kind": "baseline", "k": 0,
                                                                       "seed": None}))
    results = distributed.broadcast(results and {"samples": results.get("samples")})  # rank 0's gathered samples
    geometry = lm.vrh_decoder.geometry
    sets, unavailable = head_sets(spec, hf, geometry, dead_heads_of(lm), ready.headsets)
    model, decoder = lm.model, lm.vrh_decoder
    device = next(model.parameters()).device
    stops = stop_token_ids(lm, model)

    records = {(task, int(r["doc_id"])): r.get("vrh_record") or {}
               for task, rows in (results.get("samples") or {}).items() for r in rows}
    tokenizer = getattr(lm, "tokenizer", None) or backend_processor(lm).tokenizer

    def answer_of(task: str, doc_id: int, data) -> torch.Tensor:
        if spec.answers == "reference":
            return reference_answer(tokenizer, records[(task, doc_id)], where=f"{task} doc {doc_id}")
        ids = data["answer"].flatten()
        return ids[:answer_length(ids.tolist(), stops)]

    todo = []
    for task, rows in (results.get("samples") or {}).items():
        split = next((s for (t, s) in recorder.indexes if t == task), None)
        if split is None:
            continue
        index = recorder.indexes[(task, split)]
        chosen = {int(r["doc_id"]) for r in rows
                  if spec.pairs == "all" or (r.get("vrh_record") or {}).get("correct")}
        stored = set()
        for d in chosen:
            key = DocContext(task, split, d, None).key
            if store.has(key) and answer_of(task, d, store.read(key)).numel() > 0:
                stored.add(d)
        todo += [(task, split, a, b) for a, b in index.pairs(stored, spec.per_image)]
    todo = todo[:spec.max_pairs] if spec.max_pairs is not None else todo
    if not todo:
        raise VRHError(f"no pair of {'correctly ' if spec.pairs == 'correct' else ''}answered docs naming two objects "
                       "of one image; patching needs a task with several objects per image (e.g. RefCOCO, or "
                       "vrh_synth_grounding with objects='all')")

    runner.add_units(_part_id(t, a, b) for t, _, a, b in todo)
    mine = todo[distributed.rank()::distributed.world_size()]  # every rank patches its share of the pairs
    shown = progress and distributed.is_main()
    for task, split, a, b in console.track(mine, len(mine), "patch", "pair", enabled=shown):
        uid = _part_id(task, a, b)
        if uid in runner.done:
            continue
        da, db = (store.read(DocContext(task, split, d, None).key) for d in (a, b))
        if da["tensors"] is None or db["tensors"] is None:
            raise VRHError(f"{task} docs {a}/{b}: stored without inputs; rerun with --force")
        clean = {k: v.to(device) for k, v in da["tensors"].items()}
        corrupt = {k: v.to(device) for k, v in db["tensors"].items()}
        res = patch_pair(model, decoder, clean, corrupt, answer_of(task, a, da), answer_of(task, b, db),
                         head_sets={name: s["heads"] for name, s in sets.items()}, direction=spec.direction,
                         batch_size=spec.patch_batch)
        index = recorder.indexes[(task, split)]
        atomic.write_json(runner.job.unit_path(uid), {
            "task": task, "a": a, "b": b, "image_id": index.targets[a].image_id,
            "expressions": [index.targets[a].expression, index.targets[b].expression],
            "ld_clean": res.ld_clean, "ld_corrupt": res.ld_corrupt,
            "heads": np.nan_to_num(res.heads, nan=0.0).tolist(), "sets": res.sets})  # 0: a layer without heads
        runner.finish(uid)
    distributed.barrier()  # every rank's pairs are written
    if not distributed.is_main():
        return out / RESULT
    parts = [json.loads(runner.job.unit_path(_part_id(t, a, b)).read_text()) for t, _, a, b in todo]
    result = aggregate(parts, sets, hf, geometry, spec)
    result["unavailable_sets"] = unavailable
    result["dead_heads"] = dead_head_names(lm)
    atomic.write_json(out / RESULT, result)
    return out / RESULT


def aggregate(parts: list[dict], sets: dict[str, dict], hf, geometry, spec: PatchSpec) -> dict[str, Any]:
    """The effect map (mean and standard error over pairs; the direction's measure,
    vrh_lmms.model.interventions.patching:
    recovery when denoising, the share destroyed when noising, larger = the head carries more either way), head sets
    with image-clustered CIs, and the rank correlation of the map with the heads file's scores."""

    results = [PairResult(p["ld_clean"], p["ld_corrupt"], np.asarray(p["heads"], dtype=float), p["sets"])
               for p in parts]
    used = [i for i, r in enumerate(results) if r.gap >= spec.min_gap and r.gap > 0]
    if not used:
        raise VRHError(f"no pair has LD_clean - LD_corrupt >= {spec.min_gap} (--min-gap); the model does not tell "
                       "the two objects apart on these pairs")
    clusters = np.array([parts[i]["image_id"] or f"pair{i}" for i in used])
    direction = spec.direction
    per_pair = np.stack([results[i].effect(results[i].heads, direction) for i in used])  # (n, L, H)
    mean = per_pair.mean(0)
    se = per_pair.std(0, ddof=1) / np.sqrt(len(used)) if len(used) > 1 else np.full_like(mean, np.nan)
    scores = np.asarray(hf.scores, dtype=float)
    # only the heads the decoder has (a hybrid decoder's linear-attention layers have none): flat indices into L x H
    has = np.array([geometry.has_heads(la) for la in range(geometry.layers)]).repeat(geometry.heads)
    rho = spearmanr(mean.ravel()[has], scores.ravel()[has])
    tau = kendalltau(mean.ravel()[has], scores.ravel()[has])
    set_rows = []
    for name, s in sets.items():
        values = np.array([results[i].effect(results[i].sets[name], direction) for i in used])
        low, high = cluster_ci(values, clusters, "unbounded")  # a ratio, whatever values occur
        set_rows.append({"id": name, "kind": s["kind"], "k": s["k"], "seed": s["seed"],
                         "heads": [str(h) for h in s["heads"]], "effect": float(values.mean()),
                         "ci": [low, high], "degenerate": bool(np.all(values == values[0])),
                         "pool": s.get("pool"), "dead_heads": s.get("dead_heads", [])})
    order = np.argsort(-mean.ravel(), kind="stable")
    order = order[has[order]]
    disc_rank = {str(h): i for i, h in enumerate(hf.ranking)}
    top_heads = [{"head": head_name(*divmod(int(i), geometry.heads)), "effect": float(mean.ravel()[i]),
                  "se": float(se.ravel()[i]),
                  "discovery_rank": disc_rank.get(head_name(*divmod(int(i), geometry.heads)))}
                 for i in order[:min(20, order.size)]]
    overlap = {}
    for k in sorted({*spec.ks}):
        if 0 < k <= geometry.total_heads:
            by_rec = {head_name(*divmod(int(i), geometry.heads)) for i in order[:k]}
            overlap[str(k)] = len(by_rec & {str(h) for h in hf.ranking[:k]}) / k
    return {
        "schema": SCHEMA, "model": {"name": spec.model, "model_args": spec.model_args},
        "geometry": geometry.to_dict(), "tasks": spec.tasks, "direction": spec.direction, "metric": METRIC,
        "measure": MEASURES[direction],
        "rows": "answer rows (positions emitting the answer tokens), aligned by offset from the prompt end",
        "n_pairs": len(parts), "n_pairs_used": len(used), "min_gap": spec.min_gap,
        "ld_clean_mean": float(np.mean([results[i].ld_clean for i in used])),
        "ld_corrupt_mean": float(np.mean([results[i].ld_corrupt for i in used])),
        "effect": {"mean": mean.round(6).tolist(), "se": np.nan_to_num(se, nan=0.0).round(6).tolist()},
        "top_heads": top_heads, "sets": set_rows,
        "discovery": {"cell": hf.scoring.get("cell"), "spearman": {"rho": float(rho.statistic),
                                                                    "p": float(rho.pvalue)},
                      "kendall": {"tau": float(tau.statistic), "p": float(tau.pvalue)}, "topk_overlap": overlap},
        "heads_file": hf.describe(),
        "pairs": [{k: parts[i][k] for k in ("task", "a", "b", "image_id", "expressions", "ld_clean", "ld_corrupt")}
                  | {"used": i in used} for i in range(len(parts))],
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
