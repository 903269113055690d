"""Ranking-objective fine-tuning (`vrh-lmms rank-train`): the HF `Trainer` with our `compute_loss`.

Each training example is one ranker query (vrh_lmms.runs.rank.data.synth_set: N candidate images, one of them holding
the referred object) rendered exactly as the ranker renders it (vrh_lmms.runs.rank.capture), followed by the answer: the
referent's box in the gold image, `[ x1 , y1 , x2 , y2 ]` and end of turn, as the demo model answers. Loss =
listwise ranking loss of the chosen heads (vrh_lmms.runs.rank.loss, from the last prompt token) + `lm_weight` x the
language-model loss on the answer tokens, so the model keeps answering (the 003 summary gives no weight; 1.0 here).

Head sets: the heads file's top-k, or k random live heads (the control; `--heads random --seed S`, drawn as the
ranker draws its random-k). Heads whose output projection is all zero (the demo's pruned heads) stay pruned: their
o_proj columns get zero gradient, so the live-head pool of the ranker and the controls is unchanged by training.

Training scenes come from the synthetic stream from `scene_start` (default 200000); with the held-out seed the ids
below 200000 are refused, since the ranker (from 100000), the grounding evaluation (100000-100099) and discovery
(0-31) read them.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from vrh_lmms.base import atomic, owned
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.families import family_for_config
from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.base.heads.spec import check_heads_file_fits, resolve_spec
from vrh_lmms.base.synth.demo_spec import EVAL_SCENE_SEED, PROMPT, SPEC_FILE, DemoSpec
from vrh_lmms.model.backbone import dead_heads, locate_decoder
from vrh_lmms.model.export import copy_side_files, load_config, load_model, source_files_dir
from vrh_lmms.model.head_view import per_head
from vrh_lmms.runs.dpo_train import TrainResult, output_layout, publish_trained, vision_parameters
from vrh_lmms.runs.rank.capture import checked_spans, multi_image_inputs
from vrh_lmms.runs.rank.data import synth_set
from vrh_lmms.runs.rank.loss import DEFAULT_TEMPERATURE, candidate_masses, head_rows, listwise_loss

RECORD_FILE = "rank_train.json"
SCHEMA = "vrh-rank-train/1"
TRAIN_SCENE_START = 200_000  # held-out-seed scene ids below this are evaluation / discovery scenes
HEAD_CHOICES = ("top", "random")
DEFAULT_LR = 1e-4
DEFAULT_LM_WEIGHT = 1.0


@dataclass(frozen=True)
class RankTrainOptions:
    """Settings of one run (recorded in rank_train.json)."""

    k: int = 5
    heads: str = "top"
    seed: int = 0
    n: int = 200
    candidates: int = 4
    scene_seed: int | None = None  # None: the demo's held-out seed
    scene_start: int = TRAIN_SCENE_START
    temperature: float = DEFAULT_TEMPERATURE
    lm_weight: float = DEFAULT_LM_WEIGHT
    lr: float = DEFAULT_LR
    epochs: int = 1
    grad_accum: int = 1
    freeze_vision: bool = False

    def check(self) -> None:
        if self.k < 1:
            raise VRHError(f"--k must be >= 1, got {self.k}")
        if self.heads not in HEAD_CHOICES:
            raise VRHError(f"--heads {self.heads!r}: use one of {', '.join(HEAD_CHOICES)}")
        if self.n < 1:
            raise VRHError(f"--n must be >= 1, got {self.n}")
        if self.candidates < 2:
            raise VRHError(f"--candidates {self.candidates}: a ranking needs at least 2")
        seed = EVAL_SCENE_SEED if self.scene_seed is None else self.scene_seed
        if seed == EVAL_SCENE_SEED and self.scene_start < TRAIN_SCENE_START:
            raise VRHError(f"--scene-start {self.scene_start}: scene ids below {TRAIN_SCENE_START} of the held-out "
                           f"seed {EVAL_SCENE_SEED} are the ranker's, grounding's and discovery's evaluation scenes")
        if not self.temperature > 0:
            raise VRHError(f"--temperature must be > 0, got {self.temperature}")
        if self.lm_weight < 0:
            raise VRHError(f"--lm-weight must be >= 0, got {self.lm_weight}")
        if not self.lr > 0:
            raise VRHError(f"--lr must be > 0, got {self.lr}")
        if self.epochs < 1 or self.grad_accum < 1:
            raise VRHError(f"--epochs and --grad-accum must be >= 1, got {self.epochs} and {self.grad_accum}")


# ------------------------------------------------------------------------------------------------------ examples
def answer_ids(tokenizer, box: list[int]) -> list[int]:
    """The answer `[ x1 , y1 , x2 , y2 ]` then end of turn (the demo tokenizer splits it as its training did)."""
    x1, y1, x2, y2 = box
    return tokenizer.encode(f"[ {x1} , {y1} , {x2} , {y2} ]", add_special_tokens=False) + [tokenizer.eos_token_id]


def build_examples(processor, data, template: str, text_first: bool, spec) -> list[dict[str, Any]]:
    """One training example per query: prompt + answer ids, labels on the answer only, candidate spans, gold."""
    out = []
    for q in data.queries:
        inputs = multi_image_inputs(processor, template.format(query=q.text), data.sets[q.set_id].images, text_first)
        spans = checked_spans(processor, inputs)
        prompt = inputs["input_ids"]
        answer = torch.tensor([answer_ids(processor.tokenizer, spec.answer_box(q.extra["bbox"]))], dtype=prompt.dtype)
        ids = torch.cat([prompt, answer], dim=1)
        labels = torch.full_like(ids, -100)
        labels[:, prompt.shape[1]:] = answer
        ex = {}
        for key, value in inputs.items():  # per-token extras (mm_token_type_ids): the answer is text, type 0
            if key not in ("input_ids", "attention_mask"):
                per_token = key != "pixel_values" and value.dim() == 2 and value.shape == prompt.shape
                ex[key] = torch.cat([value, value.new_zeros(answer.shape)], 1) if per_token else value
        ex.update(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels,
                  rank_spans=[torch.as_tensor(s, dtype=torch.long) for s in spans],
                  rank_gold=int(q.gold[0]), rank_position=int(prompt.shape[1]) - 1)
        out.append(ex)
    return out


class ExampleList(torch.utils.data.Dataset):
    def __init__(self, examples: list[dict[str, Any]]) -> None:
        self.examples = examples

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.examples[i]


def one_example(features: list[dict[str, Any]]) -> dict[str, Any]:
    """Collator: examples are already a batch of one (their candidate sets differ in length)."""
    if len(features) != 1:
        raise VRHError(f"rank-train takes one query per forward (batch size 1), got {len(features)}")
    return dict(features[0])


# ------------------------------------------------------------------------------------------------------- trainer
@dataclass
class StepLoss:
    loss: torch.Tensor
    rank: torch.Tensor
    lm: torch.Tensor
    masses: torch.Tensor
    gold: int
    outputs: Any


def ranking_step_loss(model, example: dict[str, Any], heads, temperature: float, lm_weight: float) -> StepLoss:
    """One example's loss: listwise ranking loss of `heads` (their rows at the example's query row) + lm_weight x
    the model's LM loss on the labelled answer tokens (not computed into the total when lm_weight is 0)."""
    inputs = {k: v for k, v in example.items() if not k.startswith("rank_")}
    gold = int(example["rank_gold"])
    with head_rows(model, heads, int(example["rank_position"])) as grab:
        outputs = model(**inputs)
    masses = candidate_masses(grab.stacked(), example["rank_spans"])
    rank = listwise_loss(masses, gold, temperature)
    lm = outputs.loss
    loss = rank + lm_weight * lm if lm_weight else rank
    return StepLoss(loss, rank, lm.detach(), masses, gold, outputs)


def make_trainer_class():
    """The `transformers.Trainer` subclass (built lazily: transformers is imported only when training)."""
    # deferred: keeps `vrh-lmms rank-train --help` free of transformers
    import transformers

    class RankLossTrainer(transformers.Trainer):
        """`compute_loss` = listwise ranking loss of `rank_heads` + `lm_weight` x the answer's LM loss; each step's
        parts, the gold's mass share and whether the gold ranks first are added to the logged step."""

        def __init__(self, *args, rank_heads, temperature: float, lm_weight: float, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.rank_heads = tuple(rank_heads)
            self.temperature = temperature
            self.lm_weight = lm_weight
            self._parts: list[dict[str, float]] = []
            # our loss ignores num_items_in_batch, so the Trainer must divide by the accumulation steps itself
            self.model_accepts_loss_kwargs = False

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            parts = ranking_step_loss(model, inputs, self.rank_heads, self.temperature, self.lm_weight)
            masses, gold = parts.masses.detach(), parts.gold
            self._parts.append({"rank_loss": float(parts.rank.detach()), "lm_loss": float(parts.lm),
                                "gold_share": float(masses[gold] / masses.sum()),
                                "gold_top": float(masses.argmax() == gold)})
            return (parts.loss, parts.outputs) if return_outputs else parts.loss

        def log(self, logs: dict[str, float], *args, **kwargs) -> None:
            if "loss" in logs and self._parts:
                for key in self._parts[0]:
                    logs[key] = sum(p[key] for p in self._parts) / len(self._parts)
                self._parts = []
            super().log(logs, *args, **kwargs)

    return RankLossTrainer


def keep_dead_heads_dead(model, dead) -> list:
    """Zero the o_proj gradient columns of `dead` heads (they stay exactly zero under Adam: no gradient, no
    update); returns the hook handles."""
    dec = locate_decoder(model)
    handles = []
    for layer in sorted({h.layer for h in dead}):
        weight, d = dec.out_projs[layer].weight, dec.geometry.dim(layer)
        mask = torch.ones_like(weight)
        for h in dead:
            if h.layer == layer:
                per_head(mask, d)[:, h.head] = 0
        handles.append(weight.register_hook(lambda g, m=mask: g * m))
    return handles


def choose_heads(options: RankTrainOptions, heads_file, geometry, dead) -> tuple:
    """top-k of the heads file, or k random live heads drawn with `seed` (the ranker's random-k draw)."""
    if options.k > len(heads_file.ranking):
        raise VRHError(f"--k {options.k} is more than the heads file ranks ({len(heads_file.ranking)})")
    spec = f"top{options.k}" if options.heads == "top" else f"random{options.k}"
    return resolve_spec(spec, geometry, heads_file=heads_file, seed=options.seed, dead=tuple(dead)).heads


def check_output(output: Path, model_dir: str, force: bool) -> None:
    owned.check_checkpoint_output(output, model_dir, output_layout(output), force=force, what="a rank-train checkpoint")


def train(model_dir: str, heads_file_path: str, output: str | Path, options: RankTrainOptions, *,
          force: bool = False, allow_cross_model: bool = False) -> TrainResult:
    """Fine-tune `model_dir` with the ranking objective; write the checkpoint and rank_train.json into `output`
    (staged beside it and moved into place)."""
    options.check()
    output = Path(output)
    check_output(output, model_dir, force)
    # deferred: keeps `vrh-lmms rank-train --help` free of transformers
    import transformers


    hf = load_heads_file(heads_file_path)
    family = family_for_config(load_config(model_dir, False))
    model = load_model(model_dir, family, False, "auto")
    decoder = locate_decoder(model)
    check_heads_file_fits(hf, decoder.geometry, allow_cross_model=allow_cross_model)
    dead = dead_heads(decoder) or ()
    heads = choose_heads(options, hf, decoder.geometry, dead)
    processor = transformers.AutoProcessor.from_pretrained(model_dir)
    spec = DemoSpec.load(model_dir) if (Path(model_dir) / SPEC_FILE).is_file() else DemoSpec()
    text_first = spec.prompt_first
    scene_seed = EVAL_SCENE_SEED if options.scene_seed is None else options.scene_seed
    cfg = spec.scene_config() if (Path(model_dir) / SPEC_FILE).is_file() else None
    data = synth_set(options.n, options.candidates, scene_seed, options.scene_start, cfg)
    scene_ids = [int(n.split()[-1]) for s in data.sets.values() for n in s.names]
    examples = build_examples(processor, data, PROMPT.replace("{expression}", "{query}"), text_first, spec)
    frozen = set(vision_parameters(model)) if options.freeze_vision else set()
    for name, param in model.named_parameters():
        param.requires_grad_(name not in frozen)
    model.train()
    hooks = keep_dead_heads_dead(model, dead)
    staging = atomic.staging_dir(output)
    started = time.time()
    try:
        with tempfile.TemporaryDirectory(prefix="vrh-rank-train-") as scratch:
            args = transformers.TrainingArguments(
                output_dir=scratch, learning_rate=options.lr, num_train_epochs=options.epochs,
                per_device_train_batch_size=1, gradient_accumulation_steps=options.grad_accum, seed=options.seed,
                data_seed=options.seed, logging_steps=1, save_strategy="no", report_to=[],
                remove_unused_columns=False, dataloader_num_workers=0, dataloader_pin_memory=False, disable_tqdm=True,
                bf16=model.dtype == torch.bfloat16)
            trainer_cls = make_trainer_class()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                trainer = trainer_cls(model=model, args=args, train_dataset=ExampleList(examples),
                                      data_collator=one_example, rank_heads=heads,
                                      temperature=options.temperature, lm_weight=options.lm_weight)
            trainer.remove_callback(transformers.trainer_callback.PrinterCallback)
            trainer.train()
            history = list(trainer.state.log_history)
        for h in hooks:
            h.remove()
        model = trainer.model
        model.eval()
        model.save_pretrained(staging, safe_serialization=True)
        processor.save_pretrained(staging)
        copied = copy_side_files(source_files_dir(model_dir), staging)
        steps = [h for h in history if "loss" in h and "rank_loss" in h]
        record = {
            "schema": SCHEMA, "model_dir": str(model_dir), "family": family.name,
            "heads_file": str(Path(heads_file_path).resolve()),
            "heads": [str(h) for h in heads], "dead_heads": len(dead),
            "settings": {**asdict(options), "scene_seed": scene_seed, "optimizer": str(args.optim),
                         "lr_scheduler": str(args.lr_scheduler_type), "weight_decay": args.weight_decay,
                         "query_row": "last prompt token", "steps": int(trainer.state.global_step),
                         "dtype": str(model.dtype).replace("torch.", "")},
            "data": {"name": data.name, "queries": len(data.queries), "sets": len(data.sets),
                     "scene_ids": [min(scene_ids), max(scene_ids)]},
            "steps": [{k: h[k] for k in ("step", "loss", "rank_loss", "lm_loss", "gold_share", "gold_top")
                       if k in h} for h in steps],
        }
        record = publish_trained(staging, output, RECORD_FILE, record, history, started, copied, force,
                                 "a rank-train checkpoint")
    except BaseException:
        for h in hooks:
            h.remove()
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return TrainResult(output, record)
