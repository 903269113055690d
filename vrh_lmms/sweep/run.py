"""`vrh-lmms sweep`: baseline, top-k, random-k and layer-matched random-k ablations with one model load.

Each configuration is evaluated through lmms-eval's evaluator and written as `configs/<id>/` (results.json +
samples_<task>.jsonl), atomically. Everything that needs no forward pass is checked before the model loads
(`vrh_lmms.sweep.checks`). A rerun skips finished configurations and redoes partial ones; a folder holding a
different sweep with finished configurations is refused unless `force`, and one holding files vrh-lmms did not
write is always refused.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vrh_lmms.sweep import checks
from vrh_lmms.sweep.plan import Configuration

MANIFEST = checks.MANIFEST


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
    extra: dict[str, Any] = field(default_factory=dict)

    def identity(self, heads_sha: str | None) -> dict[str, Any]:
        """What must match for a folder to be resumed rather than refused."""
        return {"model": self.model, "model_args": self.model_args, "tasks": self.tasks,
                "heads_file_sha256": heads_sha, "limit": self.limit, "gen_kwargs": self.gen_kwargs,
                "seed": self.seed}


def _write_manifest(out: Path, spec: SweepSpec, identity: dict[str, Any], done: set[str], started: float) -> None:
    data = {"identity": identity, "heads_file": spec.heads_file, "batch_size": spec.batch_size,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
            "configurations": [dict(c.to_dict(), status="done" if c.id in done else "pending")
                               for c in spec.configurations], **spec.extra}
    tmp = out / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(out / MANIFEST)


def run_sweep(spec: SweepSpec, output: str | Path, force: bool = False, lm=None, progress: bool = True) -> Path:
    """Run every configuration not yet done. `lm` may be passed in to reuse a loaded model."""
    from vrh_lmms import lmms
    from vrh_lmms.heads.spec import resolve_spec

    out = Path(output)
    ready = checks.preflight(spec, out, force, lm=lm)  # nothing is written before every check has passed
    identity, hf, means, tm = ready.identity, ready.heads_file, ready.means, ready.task_manager
    checks.claim_folder(ready.folder)
    out.mkdir(parents=True, exist_ok=True)
    configs_dir = out / "configs"
    configs_dir.mkdir(exist_ok=True)
    done = {c.id for c in spec.configurations if (configs_dir / c.id / "results.json").is_file()}
    started = time.time()
    _write_manifest(out, spec, identity, done, started)
    todo = [c for c in spec.configurations if c.id not in done]
    if not todo:
        return out
    for partial in configs_dir.iterdir():  # leftovers of a killed run: redo them
        if partial.name.startswith(".") or (partial.is_dir() and not (partial / "results.json").is_file()):
            shutil.rmtree(partial, ignore_errors=True)
    if lm is None:
        lm = lmms.build_model(spec.model, spec.model_args, batch_size=spec.batch_size)
    geometry = lm.vrh_decoder.geometry
    checks.check_headsets(spec, geometry, hf)  # the loaded model's own geometry, before the first evaluation
    rank = getattr(lm, "rank", 0)
    bar = _progress(len(todo), enabled=progress and rank == 0)
    try:
        for cfg in todo:
            headset = resolve_spec(cfg.spec, geometry, heads_file=hf, seed=cfg.seed if cfg.seed is not None else 0,
                                   allow_cross_model=spec.allow_cross_model)
            lm.vrh_apply(headset, mode=cfg.mode if headset.heads else "zero", means=means)
            bar.set_description(cfg.id)
            results = lmms.evaluate(lm, spec.tasks, tm, limit=spec.limit, gen_kwargs=spec.gen_kwargs, seed=spec.seed)
            if rank == 0 and results is not None:
                record = lm.vrh_record(config={"id": cfg.id, "kind": cfg.kind, "k": cfg.k, "seed": cfg.seed})
                lmms.write_run(configs_dir / cfg.id, results, record)
                done.add(cfg.id)
                _write_manifest(out, spec, identity, done, started)
            _barrier(lm)
            bar.update(1)
    finally:
        bar.close()
        from vrh_lmms.heads.spec import HeadSet

        lm.vrh_apply(HeadSet((), "none", "baseline", 0))
    return out


def _barrier(lm) -> None:
    accelerator = getattr(lm, "accelerator", None)
    if accelerator is not None and getattr(accelerator, "num_processes", 1) > 1:
        accelerator.wait_for_everyone()


def _progress(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="sweep", unit="config", disable=not enabled)
