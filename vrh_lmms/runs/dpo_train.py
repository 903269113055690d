"""DPO on the preference pairs of `vrh-lmms dpo-pairs` with TRL's `DPOTrainer` (the VRH paper's Appendix B).

The paper's recipe is the default: chosen = the unablated model's answer, rejected = the answer of the model with its
retrieval heads masked; full fine-tune (every weight trainable, the vision tower included: the paper fine-tunes the
whole model and names no frozen part), learning rate 2e-7, 4 epochs; beta is TRL's default. The output folder is a
complete checkpoint (weights, config, processor, the source's side files) that `pretrained=OUT` loads in the vrh_*
lmms-eval wrappers, plus `dpo_train.json` (settings, the pairs file's sha256, per-epoch loss and TRL's reward
accuracy / margins).

Pure logic lives here (reading pairs into a `datasets.Dataset` with images, the TRL config, the per-epoch summary);
`vrh_lmms.cli.commands.dpo_train` is the command line.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import shutil
import sys
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vrh_lmms import __version__
from vrh_lmms.base import atomic, owned
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.families import family_for_config
from vrh_lmms.runs.dpo import is_pairs_file

RECORD_FILE = "dpo_train.json"
SCHEMA = "vrh-dpo-train/1"
PAPER_LR = 2e-7
PAPER_EPOCHS = 4
IMAGE_POSITIONS = ("before_prompt", "after_prompt")
_PAIR_KEYS = ("prompt", "chosen", "rejected", "images")
# TRL's per-step metrics summarised per epoch in dpo_train.json
_METRICS = ("loss", "rewards/accuracies", "rewards/margins", "rewards/chosen", "rewards/rejected")


@dataclass(frozen=True)
class TrainOptions:
    """Training settings; the defaults are the paper's recipe (beta None = TRL's default)."""

    lr: float = PAPER_LR
    epochs: int = PAPER_EPOCHS
    beta: float | None = None
    batch_size: int = 1
    seed: int = 0
    max_pairs: int | None = None
    image_position: str = "before_prompt"
    freeze_vision: bool = False

    def check(self) -> None:
        if not self.lr > 0:
            raise VRHError(f"--lr must be > 0, got {self.lr}")
        if self.epochs < 1:
            raise VRHError(f"--epochs must be >= 1, got {self.epochs}")
        if self.beta is not None and not self.beta > 0:
            raise VRHError(f"--beta must be > 0, got {self.beta}")
        if self.batch_size < 1:
            raise VRHError(f"--batch-size must be >= 1, got {self.batch_size}")
        if self.max_pairs is not None and self.max_pairs < 1:
            raise VRHError(f"--max-pairs must be >= 1, got {self.max_pairs}")
        if self.image_position not in IMAGE_POSITIONS:
            raise VRHError(f"--image-position {self.image_position!r}: use one of {', '.join(IMAGE_POSITIONS)}")


def require_trl():
    """TRL is an optional dependency (extra `dpo`): one line naming the extra when it is missing."""
    try:
        # deferred: optional dependency (trl) may be absent
        import trl
    except ImportError:
        raise VRHError("dpo-train needs TRL, which is not installed: pip install 'vrh-lmms[dpo]'") from None
    return trl


# ----------------------------------------------------------------------------------------------------------- pairs
def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_pairs(path: str | Path, max_pairs: int | None = None) -> list[dict]:
    """The rows of a `dpo-pairs` file (the first `max_pairs`), each checked to be one of our pairs with its image
    files present; anything else is refused naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise VRHError(f"{path}: no such pairs file")
    if not is_pairs_file(path):
        raise VRHError(f"{path} is not a preference-pairs file written by `vrh-lmms dpo-pairs` (its first line lacks "
                       f"{', '.join(_PAIR_KEYS)})")
    rows: list[dict] = []
    with open(path, encoding="utf-8") as fh:
        for number, text in enumerate(fh, 1):
            if not text.strip():
                continue
            where = f"{path}:{number}"
            try:
                row = json.loads(text)
            except ValueError:
                raise VRHError(f"{where}: not a JSON line") from None
            if not isinstance(row, dict) or any(k not in row for k in _PAIR_KEYS):
                raise VRHError(f"{where}: not a preference pair (needs {', '.join(_PAIR_KEYS)})")
            if not isinstance(row["images"], list) or not row["images"]:
                raise VRHError(f"{where}: field images is empty")
            for image in row["images"]:
                if not Path(image).is_file():
                    raise VRHError(f"{where}: image {image} does not exist")
            rows.append(row)
            if max_pairs is not None and len(rows) >= max_pairs:
                break
    if not rows:
        raise VRHError(f"{path}: no preference pairs")
    return rows


def _place_image(prompt: list[dict], image_position: str) -> list[dict]:
    """The prompt with each user turn's image parts after its text parts when the model reads the request first
    (`vrh_qwen25 ... image_position=after_prompt`, as the demo model was trained and is evaluated)."""
    if image_position == "before_prompt":
        return prompt
    out = []
    for message in prompt:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list):
            images = [part for part in content if part.get("type") == "image"]
            content = [part for part in content if part.get("type") != "image"] + images
        out.append({**message, "content": content})
    return out


def pairs_dataset(rows: list[dict], image_position: str = "before_prompt"):
    """A `datasets.Dataset` in TRL's conversational vision preference format: prompt / chosen / rejected message
    lists and an `images` column of decoded images (provenance columns dropped)."""
    # deferred: keeps `vrh-lmms dpo-train --help` free of datasets
    import datasets

    records = [{"prompt": _place_image(r["prompt"], image_position), "chosen": r["chosen"],
                "rejected": r["rejected"], "images": list(r["images"])} for r in rows]
    ds = datasets.Dataset.from_list(records)
    return ds.cast_column("images", datasets.Sequence(datasets.Image()))


def pairs_summary(rows: list[dict]) -> dict[str, Any]:
    """Where the pairs came from (their `meta`): configurations, models, chosen sources."""
    meta = [r.get("meta") or {} for r in rows]
    return {"n": len(rows), "configs": dict(Counter(str(m.get("config")) for m in meta)),
            "models": sorted({str(m.get("model")) for m in meta if m.get("model")}),
            "chosen_source": dict(Counter(str(r.get("chosen_source")) for r in rows))}


# -------------------------------------------------------------------------------------------------------- training
def trl_default_beta() -> float:
    trl = require_trl()
    return float(trl.DPOConfig.__dataclass_fields__["beta"].default)


def dpo_config(options: TrainOptions, output_dir: str | Path, *, bf16: bool = False):
    """TRL's DPOConfig for the run: lr, epochs, beta, batch size, seed; every step logged; no intermediate
    checkpoints, no trackers, no truncation (cutting a sequence could drop image tokens), no gradient checkpointing
    (TRL's default, which would only trade speed for memory), float32 unless `bf16`."""
    trl = require_trl()
    kwargs: dict[str, Any] = dict(
        output_dir=str(output_dir), learning_rate=options.lr, num_train_epochs=options.epochs,
        per_device_train_batch_size=options.batch_size, seed=options.seed, data_seed=options.seed,
        logging_steps=1, save_strategy="no", report_to=[], max_length=None, bf16=bf16, fp16=False,
        gradient_checkpointing=False, remove_unused_columns=False, dataloader_num_workers=0,
        disable_tqdm=True,
    )
    if options.beta is not None:
        kwargs["beta"] = options.beta
    return trl.DPOConfig(**kwargs)


def epoch_summary(log_history: list[dict], epochs: int) -> list[dict[str, Any]]:
    """Per epoch, the mean over its logged steps of TRL's loss and reward metrics (a step belongs to epoch e when
    its logged `epoch` lies in (e-1, e])."""
    out = []
    for e in range(1, epochs + 1):
        steps = [h for h in log_history if "loss" in h and "epoch" in h
                 and e - 1 < float(h["epoch"]) <= e + 1e-9]
        row: dict[str, Any] = {"epoch": e, "steps": len(steps)}
        for key in _METRICS:
            values = [float(h[key]) for h in steps if key in h and h[key] is not None]
            row[key.replace("rewards/", "reward_")] = sum(values) / len(values) if values else None
        out.append(row)
    return out


def vision_parameters(model) -> list[str]:
    """Names of the vision tower's parameters (transformers' VLMs keep it under a `visual` / `vision_tower` /
    `vision_model` module)."""
    parts = ("visual", "vision_tower", "vision_model")
    return [name for name, _ in model.named_parameters() if any(p in name.split(".") for p in parts)]


def output_layout(output: Path) -> owned.Layout:
    """A trained checkpoint's folder (dpo-train's and rank-train's): the files its listing names."""
    return owned.listing_layout(output)


def check_output(output: Path, model_dir: str, force: bool) -> None:
    owned.check_checkpoint_output(output, model_dir, output_layout(output), force=force, what="a dpo-train checkpoint")


def publish_trained(staging: Path, output: Path, name: str, record: dict[str, Any], history: list, started: float,
                    copied: list, force: bool, what: str, **versions: str) -> dict[str, Any]:
    """A training run's last step (dpo-train's, rank-train's): its record file `name`, ending with what every such
    record ends with (the trainer's log, wall time, versions, copied side files, when and how it ran), written into
    the staged checkpoint, which then replaces `output`. Returns the record."""
    # deferred: keeps `vrh-lmms dpo-train --help` free of torch, transformers
    import torch
    import transformers

    record = {**record, "log_history": history, "wall_seconds": round(time.time() - started, 1),
              "versions": {"vrh_lmms": __version__, **versions, "transformers": transformers.__version__,
                           "torch": torch.__version__},
              "copied_files": copied, "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "command": " ".join(sys.argv)}
    (staging / name).write_text(json.dumps(record, indent=2) + "\n")
    owned.publish_checkpoint(staging, output, output_layout(output), force=force, what=what)
    return record


@dataclass
class TrainResult:
    """What a training run (dpo-train, rank-train) hands back: its checkpoint folder and the record written there."""

    output: Path
    record: dict[str, Any]


def train(pairs: str | Path, model_dir: str, output: str | Path, options: TrainOptions, *,
          force: bool = False, trust_remote_code: bool = False) -> TrainResult:
    """Fine-tune `model_dir` with DPO on `pairs`; write the checkpoint and dpo_train.json into `output` (staged in a
    sibling folder and moved into place, so an interrupted run leaves nothing half-written)."""
    options.check()
    output, pairs = Path(output), Path(pairs)
    check_output(output, model_dir, force)
    trl = require_trl()
    rows = read_pairs(pairs, options.max_pairs)
    # deferred: keeps `vrh-lmms dpo-train --help` free of torch, transformers
    import torch
    import transformers

    from vrh_lmms.model.export import copy_side_files, load_config, load_model, source_files_dir

    family = family_for_config(load_config(model_dir, trust_remote_code))
    model = load_model(model_dir, family, trust_remote_code, "auto")
    ref_model = load_model(model_dir, family, trust_remote_code, "auto")
    frozen = vision_parameters(model) if options.freeze_vision else []
    for name, param in model.named_parameters():
        param.requires_grad_(name not in set(frozen))
    processor = transformers.AutoProcessor.from_pretrained(model_dir, trust_remote_code=trust_remote_code)
    dataset = pairs_dataset(rows, options.image_position)
    bf16 = model.dtype == torch.bfloat16
    staging = atomic.staging_dir(output)
    started = time.time()
    try:
        with tempfile.TemporaryDirectory(prefix="vrh-dpo-") as scratch:
            with warnings.catch_warnings():  # transformers' deprecation notes on the arguments TRL passes on
                warnings.simplefilter("ignore", FutureWarning)
                config = dpo_config(options, scratch, bf16=bf16)
                trainer = trl.DPOTrainer(model=model, ref_model=ref_model, args=config, train_dataset=dataset,
                                         processing_class=processor)
            trainer.remove_callback(transformers.trainer_callback.PrinterCallback)  # per-step dicts: in the record
            trainer.train()
            history = list(trainer.state.log_history)
        model = trainer.model
        model.save_pretrained(staging, safe_serialization=True)
        processor.save_pretrained(staging)
        copied = copy_side_files(source_files_dir(model_dir), staging)
        n_params = sum(p.numel() for p in model.parameters())
        n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
        record = {
            "schema": SCHEMA, "model_dir": str(model_dir), "family": family.name,
            "pairs": {"path": str(pairs.resolve()), "sha256": sha256_of(pairs), **pairs_summary(rows)},
            "settings": {**asdict(options), "beta": float(config.beta), "loss_type": list(config.loss_type),
                         "lr_scheduler": str(config.lr_scheduler_type), "warmup_steps": config.warmup_steps,
                         "optimizer": str(config.optim), "weight_decay": config.weight_decay,
                         "dtype": str(model.dtype).replace("torch.", ""),
                         "steps": int(trainer.state.global_step),
                         "steps_per_epoch": math.ceil(len(rows) / options.batch_size)},
            "trainable": {"parameters": n_train, "of": n_params, "vision_tower_frozen": options.freeze_vision,
                          "frozen_parameters": len(frozen)},
            "epochs": epoch_summary(history, options.epochs),
        }
        record = publish_trained(staging, output, RECORD_FILE, record, history, started, copied, force,
                                 "a dpo-train checkpoint", trl=trl.__version__)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return TrainResult(output, record)
