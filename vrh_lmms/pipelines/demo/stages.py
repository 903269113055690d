"""The demo's steps on one model, shared by `vrh-lmms demo` (vrh_lmms.pipelines.demo.pipeline) and its second-VLM step
(vrh_lmms.pipelines.demo.transfer): the settings, the model arguments that feed a demo model as it was trained, and
discovery and the controlled sweep on the demo's held-out scene sets.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from vrh_lmms.base.heads import kinds
from vrh_lmms.base.heads.plan import plan_configurations
from vrh_lmms.base.synth.demo_spec import DISCOVERY_START, EVAL_START, N_DISCOVERY, N_EVAL  # noqa: F401  (callers import them)
from vrh_lmms.runs.sweep.run import SweepSpec, choose_pack, run_sweep

TASK = "vrh_synth_grounding"
MODEL_LINE = "Model:"  # how demo_summary.md's line naming the model begins (a model other than the shipped one)


def batch_size(lm, wanted: int) -> int:
    """Docs per generate call: `wanted`, within what the model's backend takes (lmms-eval's llava_hf takes one)."""
    # deferred: keeps `vrh-lmms demo --help` free of filelock, transformers
    from vrh_lmms.harness.preload import batch_limit

    limit = batch_limit(type(lm))
    return wanted if limit is None else min(wanted, limit)


def model_id(lm) -> str:
    """The `--model` name of a loaded `vrh_*` model (what the run files record): the demo runs any of them."""
    return type(lm).vrh_model_id()


def demo_model_args(model: Path, spec) -> str:
    """`vrh_qwen25` model_args that feed the model as it was trained (image size; prompt before the image)."""
    return ",".join(f"{k}={v}" for k, v in {"pretrained": model, **spec.model_args()}.items())


@dataclass
class DemoSettings:
    n_discovery: int = N_DISCOVERY
    n_eval: int = N_EVAL
    ks: Sequence[int] = ()  # default: from the model's geometry (about 5%, 10% and 15% of all heads)
    # random and layer-matched draws per k: the criteria ask for >= 5, the k-curve protocol for >= 10. On the shipped
    # model one draw's drop is 0-31 points (a draw holding one of its six readers costs 20-30), so a 5-draw mean has a
    # standard error of about 4.5 points, half the 10-point bound; 10 draws bring it to about 3 within the 2 minutes
    random_seeds: int = 10
    batch_size: int = 25
    max_new_tokens: int = 16
    n_resamples: int = 5000
    n_map_docs: int = 8  # evaluation scenes whose per-head attention the explorer shows (vrh_lmms.runs.maps.doc_views)
    # optional step: steering and activation patching (vrh_lmms.runs.interventions) on scenes with every object named
    interventions: bool = False
    n_intervention_scenes: int = 16
    steer_bias: float = 8.0
    patch_pairs: int = 24
    # optional step: a second VLM on the same text backbone (vrh_lmms.pipelines.demo.transfer); "shipped": the shipped
    # one
    transfer_model: str | None = None
    # the recall step (vrh_lmms.pipelines.demo.recall): the text backbone's and the VLM's text-recall heads against the
    # grounding heads, overlap and cross-ablation at the smallest k (about a minute)
    recall: bool = True

    def resolved_ks(self, total_heads: int) -> list[int]:
        if self.ks:
            return sorted(set(int(k) for k in self.ks))
        return sorted({max(1, round(share * total_heads)) for share in (0.05, 0.15)} | {max(1, total_heads // 10)})


@contextmanager
def scoped_env(**values: str):
    """Set environment variables for the block (lmms-eval's task code reads the scene set from them)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def synth_config(spec, n: int, start: int) -> str:
    """VRH_SYNTH_CONFIG for `n` held-out scenes of the model's spec from scene id `start`."""
    return json.dumps(spec.scene_set(n, start))


def discover_heads(lm, model_args: str, spec, settings: DemoSettings, output: Path) -> Path:
    """Discovery (default scoring, out,sum,mean) on the demo's discovery scenes; returns the heads file."""
    # deferred: keeps `vrh-lmms demo --help` free of torch
    from vrh_lmms.runs.discovery.run import DiscoverySpec, run_discovery

    gen = f"max_new_tokens={settings.max_new_tokens}"
    with scoped_env(VRH_SYNTH_CONFIG=synth_config(spec, settings.n_discovery, DISCOVERY_START)):
        return Path(run_discovery(DiscoverySpec(model=model_id(lm), model_args=model_args, tasks=[TASK],
                                                output=str(output), limit=None, gen_kwargs=gen), lm=lm))


def sweep_heads(lm, model_args: str, spec, settings: DemoSettings, heads: Path, configs, output: Path,
                progress: bool, task: str = TASK, data: dict[str, str] | None = None,
                gen_kwargs: str | None = None) -> None:
    """A packed sweep of `configs` (heads from `heads`) on `task`: by default the demo's evaluation scenes; `data`:
    the task's data-choosing environment instead (e.g. VRH_NEEDLE_CONFIG), `gen_kwargs` its generation settings."""
    gen = gen_kwargs or f"max_new_tokens={settings.max_new_tokens}"
    batch = batch_size(lm, settings.batch_size)
    pack = choose_pack(None, lm, len(configs), batch)  # configurations side by side in a batch
    lm.batch_size_per_gpu = batch
    with scoped_env(**(data or {"VRH_SYNTH_CONFIG": synth_config(spec, settings.n_eval, EVAL_START)})):
        run_sweep(SweepSpec(model=model_id(lm), model_args=model_args, tasks=[task], heads_file=str(heads),
                            configurations=configs, batch_size=batch, gen_kwargs=gen, pack=pack),
                  output, lm=lm, progress=progress)


def demo_plan(ks: Sequence[int], random_seeds: int) -> list:
    """The demo sweep's configurations: baseline, top-k, live random-k and layer-matched draws, and uniform random-k
    draws over all heads beside them."""
    return plan_configurations(ks, random_seeds, True, ["zero"], uniform_random=True)


# How demo_summary.md's note on the demo model's design targets begins (the console prints that line under its table).
TARGETS_NOTE = "Design targets of the demo model"


def demo_controls(targets_only: bool = False) -> tuple[str, ...]:
    """The demo sweep's control kinds (vrh_lmms.base.heads.kinds), those drawing from the run's live pool first: the
    design targets are checked against them (`targets_only`); the kinds with a pool of their own (uniform over all
    heads) come after them."""
    planned = [kinds.kind(c.kind) for c in demo_plan([1], 1)]
    live = [k.name for k in planned if k.control and not k.pool]
    return tuple(dict.fromkeys(live if targets_only else live + [k.name for k in planned if k.control and k.pool]))
