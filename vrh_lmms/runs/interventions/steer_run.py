"""`vrh-lmms steer`: steer head sets toward another object of the image inside lmms-eval's own generation.

For every doc of a grounding task, a distractor is drawn among the other objects of its image
(vrh_lmms.runs.interventions
.pairs; the same draw for every configuration), and its image tokens (the box -> tokens rule of discovery, minus
tokens of the doc's own box) become the steering keys. Each configuration (baseline without steering, then top-k,
random-k and layer-matched random-k heads, each at every bias strength) is one lmms-eval evaluation; the backend's
`model.generate` call runs inside `steer_attention`. A prediction *moved* when its box has IoU >= 0.5 with the
distractor's box.

Output folder:
  steer.json                         identity, configurations and their status
  configs/<id>/results.json          lmms-eval results + the vrh block (with a `steering` entry)
  configs/<id>/samples_<task>.jsonl  lmms-eval samples; each line also carries `vrh_steer` (distractor, IoUs, moved)
  summary.json, report.md            moved shares with image-clustered CIs, the steering table
A configuration folder exists only when complete; a rerun resumes, a different run is refused (--force removes
the files of STEER_LAYOUT; anything else in the folder is always refused). Everything that needs no forward pass is
checked before the model loads (vrh_lmms.runs.interventions.folder.intervention_checks).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vrh_lmms.base import console
from vrh_lmms.base.boxes.geometry import iou
from vrh_lmms.base.console import LOG_NAME
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.plan import Configuration, carried_pool, check_headsets
from vrh_lmms.harness import distributed, lmms
from vrh_lmms.model.capture.extras import layout_extras
from vrh_lmms.model.capture.layouts import box_key_mask, image_token_map, lm_input_ids
from vrh_lmms.model.interventions.steering import SteerPlan, steer_attention
from vrh_lmms.runs.checks import chosen_data, dead_heads_of, sha256_of
from vrh_lmms.runs.discovery.collector import backend_processor
from vrh_lmms.runs.discovery.interceptor import DocContext, DocTracker, GenerateWrapper
from vrh_lmms.runs.discovery.queries import expression_rows, token_pieces
from vrh_lmms.runs.interventions.folder import intervention_checks
from vrh_lmms.runs.interventions.outputs import (  # noqa: F401  (the steering folder's names, for its callers)
    STEER_LAYOUT,
    SteerConfig,
    manifest_configs,
    read_steer_records,
)
from vrh_lmms.runs.interventions.outputs import STEER_MANIFEST as MANIFEST
from vrh_lmms.runs.interventions.pairs import ObjectIndex, split_targets
from vrh_lmms.runs.preflight import preflight
from vrh_lmms.runs.runner import Job, Manifest

MOVED_IOU = 0.5


def bias_label(bias: float) -> str:
    return f"b{bias:g}"


def plan_steering(plan: Sequence[Configuration], biases) -> list[SteerConfig]:
    """Baseline (nothing steered), then every head configuration of a sweep plan (`plan_configurations`, whose
    pool each configuration carries) at every bias."""
    biases = sorted({float(b) for b in biases})
    if not biases:
        raise VRHError("steering needs at least one bias strength (--bias 4,8)")
    heads = [c for c in plan if c.kind != "baseline"]
    out = [SteerConfig("baseline", "baseline", 0, None, "none", 0.0, carried_pool(plan))]
    for bias in biases:
        out.extend(SteerConfig(f"{c.id}_{bias_label(bias)}", c.kind, c.k, c.seed, c.spec, bias, c.pool) for c in heads)
    return out


@dataclass
class SteerSpec:
    model: str
    model_args: str
    tasks: list[str]
    heads_file: str
    configurations: list[SteerConfig]
    limit: int | float | None = None
    gen_kwargs: str | None = None
    seed: int = 0  # evaluator seed
    distractor_seed: int = 0
    rule: str = "overlap"
    allow_cross_model: bool = False
    batch_size: int = 1
    # what control head sets are drawn from: the pool the configurations carry (plan_steering); None takes it from
    # them, a pool given must agree with them
    control_pool: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.control_pool = carried_pool(self.configurations, self.control_pool)

    def identity(self) -> dict[str, Any]:
        return {"model": self.model, "model_args": self.model_args, "tasks": self.tasks,
                "heads_file_sha256": sha256_of(self.heads_file), "limit": self.limit, "gen_kwargs": self.gen_kwargs,
                "seed": self.seed, "distractor_seed": self.distractor_seed, "rule": self.rule,
                "control_pool": self.control_pool} | chosen_data(self.tasks)


class Steerer:
    """Per doc: the distractor and its key positions; per batch: the steering plan of the current configuration."""

    def __init__(self, lm, tracker: DocTracker, seed: int, rule: str) -> None:
        self.family = lm.vrh_family_spec.name
        self.processor = backend_processor(lm)
        self.tokenizer = getattr(lm, "tokenizer", None) or self.processor.tokenizer
        self.tracker, self.seed, self.rule = tracker, seed, rule
        self.indexes: dict[tuple[str, str], ObjectIndex] = {}
        self.heads: list = []
        self.bias = 0.0
        self.info: dict[tuple[str, int], dict[str, Any]] = {}

    def index(self, task: str, split: str) -> ObjectIndex:
        if (task, split) not in self.indexes:
            docs = dict.__getitem__(self.tracker, task)[split]
            self.indexes[(task, split)] = ObjectIndex(split_targets(docs, where=task))
        return self.indexes[(task, split)]

    def row_keys(self, ctx: DocContext, tensors: dict, row: int, check_expression: bool) -> torch.Tensor:
        """(P,) bool steering keys of batch row `row` (the distractor's image tokens minus the doc's own box)."""
        idx = self.index(ctx.task, ctx.split)
        target = idx.targets[ctx.doc_id]
        extras = layout_extras(self.family, self.processor, tensors, row)
        ids = lm_input_ids(self.family, tensors["input_ids"][row].detach().cpu(), target.image_size, extras)
        n = ids.numel()
        if check_expression and target.expression:
            if not expression_rows(token_pieces(self.tokenizer, ids.tolist()), target.expression):
                raise VRHError(f"{ctx.task} doc {ctx.doc_id}: its expression is not in batch row {row}; this backend "
                               "batches docs in another order than it looks them up: steer with batch size 1")
        other = idx.distractor(ctx.doc_id, self.seed)
        info: dict[str, Any] = {"steer_doc_id": other, "steer_box": None, "n_steer_tokens": 0,
                                "steerable": False, "steered": False}
        keys = torch.zeros(n, dtype=torch.bool)
        if other is not None:
            box = idx.targets[other].box
            tmap = image_token_map(self.family, ids, target.image_size, extras)
            keys = box_key_mask(tmap, box, n, self.rule) & ~box_key_mask(tmap, target.box, n, self.rule)
            info.update(steer_box=[float(v) for v in box], n_steer_tokens=int(keys.sum()), steerable=bool(keys.any()),
                        steered=bool(keys.any() and self.heads))
        self.info[(ctx.task, ctx.doc_id)] = info
        return keys

    def plan(self, ctxs: list[DocContext], tensors: dict) -> SteerPlan | None:
        rows = [self.row_keys(ctx, tensors, i, len(ctxs) > 1) for i, ctx in enumerate(ctxs)]
        keys = torch.stack(rows)
        if not self.heads or not keys.any():
            return None
        return SteerPlan(self.heads, keys, self.bias, prompt_len=keys.shape[1])

    def record(self, task: str, doc_id: int, vrh_record: dict[str, Any]) -> dict[str, Any]:
        """The `vrh_steer` entry of one sample line: the distractor, the prediction's IoUs, moved or not."""
        info = dict(self.info.get((task, doc_id)) or {"steerable": False, "steered": False, "steer_box": None})
        if not isinstance(vrh_record, dict) or vrh_record.get("kind") != "grounding":
            raise VRHError(f"{task} doc {doc_id}: steering needs grounding records (vrh_record kind 'grounding')")
        pred = vrh_record.get("pred_box")
        box = info.get("steer_box")
        info["iou_steer"] = None if pred is None or box is None else round(float(iou(pred, box)), 4)
        info["moved"] = bool(info["steerable"] and info["iou_steer"] is not None and info["iou_steer"] >= MOVED_IOU)
        info["bias"], info["heads"] = self.bias, [str(h) for h in self.heads]
        return info


class BatchDocTracker(DocTracker):
    """A DocTracker that also lists the docs looked up since the last generate call (a batch's docs, in order)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.recent: list[DocContext] = []
        self._last: DocContext | None = None

    @property
    def last(self) -> DocContext | None:  # type: ignore[override]
        return self._last

    @last.setter
    def last(self, ctx: DocContext) -> None:
        self._last = ctx
        self.recent.append(ctx)

    def batch(self, size: int) -> list[DocContext]:
        """The docs of a batch of `size` rows; refuses when the lookups do not say."""
        seen: dict[str, DocContext] = {}
        for ctx in reversed(self.recent):  # the batch's docs are the last ones looked up
            if len(seen) == size:
                break
            seen.setdefault(ctx.key, ctx)
        self.recent = []
        if size == 1 and self._last is not None:
            return [self._last]
        if len(seen) != size:
            raise VRHError(f"could not tell which docs a batch of {size} holds ({len(seen)} docs looked up before "
                           "generate); steer with batch size 1")
        return list(reversed(seen.values()))


class SteeringInterceptor(GenerateWrapper):
    """The backend's `model.generate`, run inside the steering scope of the docs of its batch."""

    def __init__(self, model, tracker: BatchDocTracker, steerer: Steerer) -> None:
        self.tracker, self.steerer = tracker, steerer
        super().__init__(model)

    def _generate(self, *args, **kwargs):
        ids = kwargs.get("input_ids")
        if args or ids is None:
            raise VRHError("steering expects the backend to call model.generate(input_ids=..., ...) with keywords")
        ctxs = self.tracker.batch(ids.shape[0])
        tensors = {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
        plan = self.steerer.plan(ctxs, tensors)
        if plan is None:
            return self._original(**kwargs)
        with steer_attention(self.model, plan):
            return self._original(**kwargs)


def steer_job(spec: SteerSpec, out: Path) -> Job:
    """The steering run as the runner's job (vrh_lmms.runs.runner): one configuration folder per unit."""
    by_id = {c.id: c for c in spec.configurations}
    return Job(out=out, layout=STEER_LAYOUT, manifest=Manifest(out / MANIFEST), identity=spec.identity(),
               units=list(by_id), units_dir=out / "configs", unit="configuration",
               describe=lambda uid: by_id[uid].to_dict(),
               fields=lambda: {"heads_file": spec.heads_file, "control_pool": spec.control_pool},
               extra=dict(spec.extra), log=out / LOG_NAME)


def run_steering(spec: SteerSpec, output: str | Path, force: bool = False, lm=None, progress: bool = True) -> Path:
    """Run every configuration not yet done (the caller writes summary.json and report.md with
    vrh_lmms.report.interventions.write_steering_report). On several ranks every rank steers its shard of the docs,
    rank 0 alone writes (vrh_lmms.harness.distributed)."""
    out = Path(output)
    if spec.batch_size < 1:
        raise VRHError(f"--batch-size must be at least 1, got {spec.batch_size}")
    if not spec.heads_file:
        raise VRHError("steering needs --heads-file (its ranking gives the top-k heads)")
    distributed.ensure_group()
    ready = preflight(intervention_checks(spec, "steer", steer_job(spec, out), spec.configurations), force, lm=lm)
    hf, tm, runner = ready.heads_file, ready.task_manager, ready.runner
    configs_dir = out / "configs"
    runner.unavailable = dict(ready.unavailable)
    runner.claim()  # nothing is written before every check has passed
    if runner.pending:
        lm = runner.model(lambda: lmms.build_model(spec.model, spec.model_args, batch_size=spec.batch_size))
        if lm.vrh_headset.heads:
            raise VRHError(f"steering runs on the intact model, but model_args ablate {lm.vrh_headset.spec}")
        geometry = lm.vrh_decoder.geometry
        dead = dead_heads_of(lm)
        runner.unavailable = check_headsets(spec.configurations, geometry, hf, dead, spec.allow_cross_model,
                                            ready.headsets)
        runner.write_manifest()
        by_id = {c.id: c for c in spec.configurations}
        tracker = BatchDocTracker(lm.task_dict)
        lm.task_dict = tracker
        steerer = Steerer(lm, tracker, spec.distractor_seed, spec.rule)
        interceptor = SteeringInterceptor(lm.model, tracker, steerer)
        bar = console.bar(len(runner.pending), "steer", "config", enabled=progress and distributed.is_main())

        def steer_one(uid: str) -> bool:
            """Evaluate one configuration; rank 0 publishes its folder (False on the other ranks)."""
            cfg = by_id[uid]
            headset = ready.headsets.get(cfg, geometry, dead)  # resolved by the checks, not drawn again
            steerer.heads, steerer.bias = list(headset.heads), cfg.bias
            bar.set_description(cfg.id)
            results = lmms.evaluate(lm, spec.tasks, tm, limit=spec.limit, gen_kwargs=spec.gen_kwargs, seed=spec.seed)
            info = distributed.gather_dicts(steerer.info)  # every rank's docs, on rank 0
            if results is not None:
                steerer.info = info
                for task, rows in (results.get("samples") or {}).items():
                    for row in rows:
                        row["vrh_steer"] = steerer.record(task, int(row["doc_id"]), row.get("vrh_record"))
                record = lm.vrh_record(config={"id": cfg.id, "kind": "steer", "k": cfg.k, "seed": cfg.seed})
                record["steering"] = {**cfg.to_dict(), "heads": headset.names, "rule": spec.rule,
                                      "distractor_seed": spec.distractor_seed}
                lmms.write_run(configs_dir / cfg.id, results, record)
            distributed.barrier()
            bar.update(1)
            return results is not None

        try:
            runner.run(steer_one)
        finally:
            bar.close()
            interceptor.uninstall()
            lm.task_dict = dict(tracker)
    return out
