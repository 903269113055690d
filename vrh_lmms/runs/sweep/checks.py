"""Everything a sweep can check before its model loads, and what it may do with an existing output folder.

`preflight` declares the sweep's checks to the corridor (vrh_lmms.runs.preflight), which runs them in this order
without writing anything: the task names (a text search of the task YAMLs, under a second), the model name and model
args, the checkpoint path, the heads file and its means, every configuration's k against the heads file, the output
folder, the tasks (lmms-eval's TaskManager), and the geometry declared by the checkpoint's config.json against the
heads file and every k. Only then is the folder claimed
(vrh_lmms.runs.runner) and the model loaded, so a typo costs seconds, not a model load or a baseline run.

Output folder rules (`sweep_job`, applied by vrh_lmms.runs.runner): a folder holding anything vrh-lmms did not
write is refused, even with --force; a folder of the same sweep is resumed; a different sweep that has finished
configurations is refused unless --force (which then removes exactly the sweep's own files); one that finished
nothing (a run that failed early) never blocks: its leftovers are replaced.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vrh_lmms.base import owned
from vrh_lmms.base.console import LOG_NAME
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import kinds
from vrh_lmms.base.runfile import RUN_FILE
from vrh_lmms.runs.checks import data_identity, sha256_of
from vrh_lmms.runs.preflight import Checks, Ready
from vrh_lmms.runs.runner import CONFIG_ENTRY, Job, Manifest
from vrh_lmms.runs.sweep.exclusion import discovery_docs, offsets_for

MANIFEST = "sweep.json"
CONFIGS = "configs"
# How to do what a model arg would do in a sweep (each configuration sets its own heads).
INSTEAD = {
    "heads": "each configuration sets its own heads; choose them with --k, --random-seeds, --layer-matched "
             "and --heads-file",
    "heads_file": "pass the heads file as --heads-file",
    "ablation": "use --ablation zero|mean|zero,mean",
    "allow_cross_model": "use --allow-cross-model",
    "seed": "random draws are seeded per configuration (--random-seeds); --seed sets the evaluator seed",
    "means_file": "mean ablation reads the means file written beside --heads-file",
    "heads_cell": "the sweep ranks heads by the heads file's primary cell",
}

SWEEP_LAYOUT: dict[str, owned.Check | None] = {
    MANIFEST: owned.json_with("identity", "configurations"),
    f".{MANIFEST}.*": owned.is_file,  # its atomic write's temporary (`.sweep.json.tmp` before)
    CONFIGS: owned.folder_of({"*": CONFIG_ENTRY}),
    RUN_FILE: owned.is_file,  # the run file a finished `vrh-lmms sweep` writes (vrh_lmms.base.runfile)
    f".{RUN_FILE}.*": owned.is_file,
    LOG_NAME: owned.log_file,
}


# ------------------------------------------------------------------------------------------------ the folder
def sweep_job(out: Path, identity: dict[str, Any]) -> Job:
    """The sweep as the runner's job (vrh_lmms.runs.runner): its folder rules are the module doc's; run_sweep adds
    the configurations and the manifest's fields once the model's checks have passed."""
    return Job(out=out, layout=SWEEP_LAYOUT, manifest=Manifest(out / MANIFEST), identity=identity,
               units_dir=out / CONFIGS, what="sweep", unit="configuration", replace_unfinished=True,
               log=out / LOG_NAME)


# ------------------------------------------------------------------------------------------------ preflight
def check_modes(spec, model) -> None:
    """What an ablation mode needs of the loaded model, before the first evaluation: `uniform_image` averages over
    the image tokens, so the model must name its image token id."""
    if any(c.mode == "uniform_image" for c in spec.configurations):
        # deferred: keeps `vrh-lmms report` free of torch, transformers
        from vrh_lmms.model.interventions.uniform import image_token_ids

        image_token_ids(model)


def sweep_checks(spec, out: Path) -> Checks:
    """A sweep's checks, declared for the corridor (vrh_lmms.runs.preflight.preflight runs them, cheapest first:
    the task index and the backend import take seconds each). In the Ready it returns, Ready.found holds the means
    (mean ablation) and the discovery docs left out (`offsets`); Ready.headsets every configuration's head set,
    handed forward to the run."""
    # deferred: keeps `vrh-lmms report` free of torch
    from vrh_lmms.model.ablation import load_means, means_path_for
    from vrh_lmms.runs.doc_check import check_run_docs

    def settings() -> None:
        if spec.batch_size < 1:
            raise VRHError(f"--batch-size must be at least 1, got {spec.batch_size}")
        if spec.limit is not None and spec.limit <= 0:
            raise VRHError(f"--limit must be positive, got {spec.limit}")

    def with_heads_file(ready: Ready) -> None:
        hf = ready.heads_file
        needs_file = [c.id for c in spec.configurations if kinds.kind(c.kind).needs_file]
        if needs_file and hf is None:
            raise VRHError(f"configurations {', '.join(needs_file[:3])} need --heads-file")
        ready.found["means"] = None
        if any(c.mode == "mean" for c in spec.configurations):
            if hf is None:
                raise VRHError("--ablation mean needs --heads-file (its means file is written beside it)")
            ready.found["means"] = load_means(means_path_for(spec.heads_file))
        ready.found["offsets"] = discovery_offsets(spec, hf)

    def job(ready: Ready) -> Job:
        offsets = ready.found["offsets"]
        identity = spec.identity(sha256_of(spec.heads_file)) | data_identity(list(spec.tasks)) \
            | ({"excluded_docs": offsets} if offsets else {})
        return sweep_job(out, identity)

    def docs(ready: Ready) -> None:  # every doc, before the folder or the weights
        check_run_docs(ready.task_manager, ready.tasks, spec.limit, offsets=ready.found["offsets"])

    return Checks("sweep", spec.model, spec.model_args, list(spec.tasks), spec.heads_file, head_args=INSTEAD,
                  batch_size=spec.batch_size, configurations=spec.configurations,
                  allow_cross_model=spec.allow_cross_model, settings=settings, with_heads_file=with_heads_file,
                  job=job, docs=docs)


def discovery_offsets(spec, hf) -> dict[str, int]:
    """`--exclude-discovery-docs`: per swept task, the leading docs discovery used (vrh_lmms.runs.sweep.exclusion)."""
    mode = getattr(spec, "exclude_discovery_docs", "off")
    if mode not in ("on", "auto"):
        return {}
    if hf is None and mode == "auto":
        return {}
    if hf is None:
        raise VRHError("--exclude-discovery-docs needs --heads-file (it names the docs discovery used)")
    docs = discovery_docs(hf)
    offsets = offsets_for(list(spec.tasks), docs, str(hf.path))
    if not offsets and mode == "on":
        raise VRHError(f"--exclude-discovery-docs: discovery used {', '.join(docs)}, which this sweep does not "
                       f"evaluate ({', '.join(spec.tasks)}); drop the flag")
    return offsets
