"""Train the demo's tiny VLM (a real `Qwen2_5_VLForConditionalGeneration`) the way real VLMs are made.

Three phases, each optional (docs/demo-model-experiments.md says what each design measured):

1. **text**: the language backbone alone learns synthetic text tasks (`vrh_lmms.base.synth.text_tasks`: associative
   recall, a textual twin of grounding, copy, sort, count, add), so its heads get jobs before any image exists;
2. **align**: the backbone is frozen and the vision tower + projector (from scratch) learn to feed it, on
   grounding and short VQA about the same scenes (`research.demo_model.visual_tasks`), image first as lmms-eval
   sends it;
3. **joint**: everything trains, the backbone at a lower rate, with text batches still mixed in.

Grounding inputs are built exactly as lmms-eval's `qwen2_5_vl` backend builds them (chat template, JPEG round
trip, processor patching; `research.demo_model.sequences`, `research.demo_model.data`), so the model is trained
on what the evaluation feeds it. The loss covers only answer tokens. Light head dropout (zero a head's `o_proj`
input slice, as the ablation does) is available as a regulariser. Everything is a function of the seeds: init,
data, dropout.
"""

from __future__ import annotations

import json
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from research.demo_model import head_prune, run_state
from research.demo_model.data import FastEncoder, decoded_image
from research.demo_model.evaluation import evaluate, held_out_scenes, prepare
from research.demo_model.model_heads import chosen_layers
from research.demo_model.sequences import Encoded, TurnEncoder, collate
from research.demo_model.visual_tasks import questions
from vrh_lmms.base.heads.geometry import head_name
from vrh_lmms.base.synth.demo_spec import TRAIN_SCENE_SEED, DemoSpec
from vrh_lmms.base.synth.scenes import Scene, generate_scene
from vrh_lmms.base.synth.text_tasks import TEXT_TASKS, TextTaskConfig, extra_words, sample_examples
from vrh_lmms.model.backbone import HEAD_OUT, Hook, locate_decoder, site_name
from vrh_lmms.model.tiny import qwen2_5_vl as tiny
from vrh_lmms.model.tiny.common import save_checkpoint, seeded

DESIGN_FILE = "train_design.json"
BACKBONE_DIR = "backbone"
PHASES_DIR = "phases"
EVAL_SEED = 987_654  # held-out text examples and VQA questions: the same for every training seed


class PhaseHook(Protocol):
    """Extra work a design adds to a phase's optimizer steps (e.g. research/head_lasso.py's proximal lasso), returned
    by `Design.phase_hooks`: `begin` when the phase starts (with its `state()` from a resumed run, else None),
    `after_step` after every optimizer step (with the backbone's current rate), `figures` into each evaluation
    record, `state` into the resume state."""

    def begin(self, saved: dict[str, Any] | None) -> None: ...

    def after_step(self, step: int, backbone_lr: float) -> None: ...

    def figures(self) -> dict[str, Any]: ...

    def state(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Design:
    """Model geometry, data and the recipe of each training phase."""

    name: str
    spec: DemoSpec = field(default_factory=DemoSpec)
    text: dict[str, Any] = field(default_factory=dict)
    vision: dict[str, Any] = field(default_factory=dict)
    init_range: float = 0.08
    rope_theta: float = 1e4
    mrope_section: tuple = ()  # default: the factory's split of head_dim / 2 into (t, h, w)
    text_tasks: tuple = TEXT_TASKS
    text_config: dict[str, Any] = field(default_factory=dict)  # TextTaskConfig overrides
    task_weights: dict[str, float] = field(default_factory=dict)  # sampling weight of each text task (default 1)
    # text phases, run in order: (steps, text tasks (empty: all of text_tasks), recall ramp in steps[, text_config
    # overrides for this phase and every later one]); then the visual phases' lengths. 0 steps skips a phase.
    # Every phase starts a fresh optimizer and its own schedule.
    text_phases: tuple = ((4000, (), 2000),)
    align_steps: int = 1000
    joint_steps: int = 3000
    text_batch: int = 64
    vis_batch: int = 32  # sequences per visual batch
    questions_per_image: int = 2
    vqa_share: float = 0.5  # share of visual questions that are VQA rather than grounding
    text_share: float = 1 / 3  # share of batches in the joint phase that are text
    lr: float = 2e-3
    lm_lr: float = 5e-4  # backbone rate in the joint phase
    # backbone parameters kept frozen in the joint phase (substrings of their names, e.g. "self_attn." for every
    # attention weight): the visual task then has to route through the heads text pretraining made
    joint_frozen: tuple = ()
    warmup: int = 100
    min_lr_frac: float = 0.05
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    head_drop: float = 0.0
    # where head dropout applies: text-layer indices (empty: every layer) and phase kinds (empty: every phase), e.g.
    # only the early layers that build the lookup's inputs, and only in the joint phase
    head_drop_layers: tuple = ()
    head_drop_kinds: tuple = ()
    # the step of each chosen phase from which dropout applies: e.g. only after the joint phase has learned to ground,
    # so that the regulariser spreads a function that exists rather than slowing its learning
    head_drop_from: int = 0
    # more layers whose dropout starts later, at step head_drop_late_from of the chosen phases: e.g. the
    # pruning's survivors once pruning has ended, so the few readers left become redundant with one another, as a 7B
    # VLM's retrieval heads are (one alone costs little, most of them together break grounding)
    head_drop_late_layers: tuple = ()
    head_drop_late_from: int = 0
    # importance-based head pruning (research/demo_model/head_prune.py) in the joint phase: the heads of these text
    # layers
    # are pruned, least important first, from joint step head_prune_steps[0] to [1], until head_prune_keep are left
    # (None: no pruning); importance is measured from head_prune.WINDOW steps before the first prune
    head_prune_layers: tuple = ()
    head_prune_keep: int | None = None
    head_prune_steps: tuple = (0, 0)
    # heads ("L4H12") that are never pruned: a second VLM on a shared backbone keeps the first one's survivors, as two
    # VLMs of one LLM share its idle heads (empty: the importance alone decides)
    head_prune_survivors: tuple = ()
    # more pruned groups, each (layers, keep): pruned on head_prune_steps' schedule by their own importance ranking
    # and count, e.g. layer 2 kept to 4 of its heads beside layers 3-5 kept to 6 (one shared count would let one
    # group's heads decide the other's)
    head_prune_extra: tuple = ()
    # [[until_visual_step, {SceneConfig overrides}], ...]: easier scenes first; the spec's own scenes after. Visual
    # steps count through align and then joint (joint step s is visual step align_steps + s).
    curriculum: tuple = ()
    eval_every: int = 500
    eval_n: int = 128

    @property
    def task_config(self) -> TextTaskConfig:
        return TextTaskConfig(**self.text_config)

    def visual_step(self, phase_kind: str, step: int) -> int:
        """The curriculum's clock: steps of visual training so far (align first, then joint)."""
        return step + (self.align_steps if phase_kind == "joint" else 0)

    def scene_spec(self, visual_step: int) -> DemoSpec:
        for until, overrides in self.curriculum:
            if visual_step < until:
                return replace(self.spec, scene={**self.spec.scene, **overrides})
        return self.spec

    def phase_hooks(self, model, phase_kind: str) -> list[PhaseHook]:
        """Extra per-step work of this design in a phase of this kind (none here; research designs add some)."""
        return []

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Design":
        data = dict(data)
        data["spec"] = DemoSpec.from_dict(data.get("spec", {}))
        for key in ("curriculum",):
            data[key] = tuple((int(u), dict(o)) for u, o in data.get(key, ()))
        for key in ("mrope_section", "text_tasks", "joint_frozen", "head_drop_layers", "head_drop_kinds",
                    "head_drop_late_layers", "head_prune_layers", "head_prune_steps", "head_prune_survivors"):
            if key in data:
                data[key] = tuple(data[key])
        if "head_prune_extra" in data:
            data["head_prune_extra"] = tuple((tuple(layers), int(keep)) for layers, keep in data["head_prune_extra"])
        if "text_phases" in data:
            data["text_phases"] = tuple((int(p[0]), tuple(p[1]), int(p[2]), *p[3:]) for p in data["text_phases"])
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def make_tokenizer():
    return tiny.make_tokenizer(extra_words=extra_words())


def build_model(design: Design, tokenizer, seed: int):
    """A real Qwen2.5-VL from a tiny config; head_dim = hidden_size / heads, as its attention computes it."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    text = dict(design.text)
    if "hidden_size" in text and "num_attention_heads" in text:
        text.setdefault("head_dim", text["hidden_size"] // text["num_attention_heads"])
    config = tiny.make_config(tokenizer, text=text, vision=design.vision, initializer_range=design.init_range,
                              rope_theta=design.rope_theta, mrope_section=list(design.mrope_section) or None)
    with seeded(seed):
        model = Qwen2_5_VLForConditionalGeneration(config).to(torch.float32)
    model.set_attn_implementation({"text_config": "sdpa", "vision_config": "sdpa"})
    return model


def is_vision_param(name: str) -> bool:
    return name.startswith("model.visual.")


def checkpoint_state(path: str | Path) -> dict[str, torch.Tensor]:
    """A saved checkpoint's weights under the live model's parameter names (`save_pretrained` writes the original
    hub key layout, which only `from_pretrained` maps back)."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    return Qwen2_5_VLForConditionalGeneration.from_pretrained(str(path), dtype=torch.float32).state_dict()


def load_backbone(model, backbone: str | Path) -> None:
    """Copy a text-pretrained checkpoint's language model, embeddings and head into `model` (vision untouched)."""
    own = model.state_dict()
    text = {k: v for k, v in checkpoint_state(backbone).items() if not is_vision_param(k)}
    bad = [k for k in own if not is_vision_param(k) and (k not in text or text[k].shape != own[k].shape)]
    if bad:
        raise ValueError(f"backbone {backbone} does not match this design's text geometry (e.g. {bad[:2]})")
    model.load_state_dict(text, strict=False)


# ---------------------------------------------------------------- batches


def train_scene(seed: int, step: int, i: int, spec: DemoSpec) -> Scene:
    """Scene i of visual step `step` for this training seed (never overlaps the held-out stream)."""
    return generate_scene(seed * 10**12 + step * 1000 + i, TRAIN_SCENE_SEED, spec.scene_config())


class BatchMaker:
    """Text and visual batches, each a pure function of (seed, phase step)."""

    def __init__(self, design: Design, turns: TurnEncoder, pixels: FastEncoder, seed: int):
        self.design, self.turns, self.pixels, self.seed = design, turns, pixels, seed

    def recall_pairs(self, step: int, ramp: int) -> int:
        """Recall pairs allowed at this step: from 2 up to the task config's `recall_pairs` over `ramp` steps."""
        top = self.design.task_config.recall_pairs
        return top if ramp <= 0 else int(min(top, 2 + (top - 2) * step / ramp))

    def text(self, step: int, recall_pairs: int, batch: int | None = None, seed_key: int = 11,
             mixed: bool = False, tasks: tuple = ()) -> dict:
        """A text batch: one task per training batch (similar lengths, little padding), or all tasks mixed."""
        d = self.design
        tasks = tasks or d.text_tasks
        if not mixed:
            w = np.array([d.task_weights.get(t, 1.0) for t in tasks], dtype=float)
            pick = np.random.default_rng([self.seed, step, seed_key, 1]).choice(len(tasks), p=w / w.sum())
            tasks = [tasks[int(pick)]]
        exs = sample_examples([self.seed, step, seed_key], batch or d.text_batch, tasks, d.task_config,
                              max_recall_pairs=recall_pairs)
        out = collate([self.turns.encode(e.prompt, e.answer, False, e.prompt_loss) for e in exs], self.turns.pad_id)
        out["kind"] = "text"
        out["tasks"] = [e.task for e in exs]
        return out

    def visual(self, step: int, scenes: list[Scene] | None = None, vqa_share: float | None = None,
               spec: DemoSpec | None = None) -> dict:
        d = self.design
        spec = spec or d.spec  # the curriculum's scenes are the caller's choice (it knows the visual step)
        q_per = max(1, d.questions_per_image)
        if scenes is None:
            scenes = [train_scene(self.seed, step, i, spec) for i in range(math.ceil(d.vis_batch / q_per))]
        rng = np.random.default_rng([self.seed, step, 13])
        seqs: list[Encoded] = []
        index: list[int] = []
        tasks: list[str] = []
        for i, scene in enumerate(scenes):
            for q in questions(scene, rng, spec, q_per, d.vqa_share if vqa_share is None else vqa_share):
                seqs.append(self.turns.encode(q.prompt, q.answer, True))
                index.append(i)
                tasks.append(q.task)
        out = collate(seqs, self.turns.pad_id)
        images = np.stack([decoded_image(s, self.design.spec) for s in scenes])
        out.update(kind="visual", tasks=tasks, image_index=torch.tensor(index),
                   pixel_values=self.pixels.pixel_values(images),
                   image_grid_thw=self.pixels.grid_thw.expand(len(scenes), -1).clone())
        return out


class Prefetch:
    """Batches built in a helper thread (pure functions of their step, so threading changes nothing)."""

    def __init__(self, make: Callable[[int], dict], start: int, stop: int, depth: int = 3):
        self.q: queue.Queue = queue.Queue(maxsize=depth)
        self.thread = threading.Thread(target=lambda: [self.q.put(make(s)) for s in range(start, stop)],
                                       daemon=True)
        self.thread.start()

    def __next__(self) -> dict:
        return self.q.get()


# ---------------------------------------------------------------- forward and loss


def forward_hidden(model, batch: dict) -> torch.Tensor:
    """Last hidden states; for visual batches the vision tower runs once per distinct image."""
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    ids = batch["input_ids"]
    if batch["kind"] == "text":
        return model.model(input_ids=ids, use_cache=False).last_hidden_state
    image_id = model.config.image_token_id
    mm_types = (ids == image_id).long()
    vis = model.model.get_image_features(batch["pixel_values"], batch["image_grid_thw"])
    feats = torch.stack(list(vis.pooler_output))[batch["image_index"]]
    mm = {"image": BaseModelOutputWithPooling(pooler_output=tuple(feats.unbind(0)))}
    grid = batch["image_grid_thw"][batch["image_index"]]
    pos, _ = model.model.get_rope_index(ids, mm_token_type_ids=mm_types, image_grid_thw=grid)
    out = model.model(input_ids=ids, position_ids=pos, mm_token_type_ids=mm_types, mm_encoder_outputs=mm,
                      use_cache=False)
    return out.last_hidden_state


def answer_logits(model, batch: dict) -> torch.Tensor:
    hidden = forward_hidden(model, batch)
    return model.lm_head(hidden[batch["loss_rows"], batch["loss_pos"]])


@torch.no_grad()
def exact_match(model, batch: dict) -> dict[str, float]:
    """Teacher-forced exact match per task: greedy decoding reproduces an answer iff every answer token is the
    argmax given the correct prefix, so this equals greedy exact match at a fraction of the cost."""
    hits = (answer_logits(model, batch).argmax(-1) == batch["targets"]).numpy()
    rows = batch["loss_rows"].numpy()
    ok = np.ones(len(batch["tasks"]), dtype=bool)
    np.logical_and.at(ok, rows, hits)
    out: dict[str, list[bool]] = {}
    for task, good in zip(batch["tasks"], ok):
        out.setdefault(task, []).append(bool(good))
    return {t: float(np.mean(v)) for t, v in sorted(out.items())}


class HeadDrop:
    """Zero each (sample, layer, head) output slice with probability p during training, without rescaling; only in
    `layers` (text-layer indices; empty: all) while `active`, and in `late_layers` while `late_active` (a later
    start; the generator is not drawn from for a layer that is off, so a run equals one without its late layers until
    they start)."""

    def __init__(self, model, p: float, generator: torch.Generator, layers: tuple = (), late_layers: tuple = ()):
        self.p, self.gen, self.active, self.late_active = p, generator, False, False
        if p <= 0:
            return
        both = sorted(set(layers) & set(late_layers))
        if both:
            raise ValueError(f"head_drop_late_layers {both} are also in head_drop_layers: a layer's dropout starts "
                             "once")
        if late_layers and not layers:
            raise ValueError("head_drop_late_layers need head_drop_layers: empty head_drop_layers means every layer")
        chosen = [(False, index) for index, _ in chosen_layers(model, layers, "head_drop_layers")]
        if late_layers:
            chosen += [(True, index) for index, _ in chosen_layers(model, late_layers, "head_drop_late_layers")]
        decoder = locate_decoder(model)
        n_heads, hd = decoder.geometry.heads, decoder.geometry.head_dim
        hooks = []
        for late, index in chosen:
            def drop(x, late=late):
                if not (self.late_active if late else self.active):
                    return None
                keep = (torch.rand(x.shape[0], 1, n_heads, 1, generator=self.gen) >= self.p).to(x.dtype)
                return (x.view(*x.shape[:2], n_heads, hd) * keep).view_as(x)

            hooks.append(Hook(site_name(index, HEAD_OUT), drop))
        decoder.install(hooks)  # for the model's life: dropout acts only while the trainer switches it on


def prune_groups(design: Design) -> list[tuple[tuple, int, tuple]]:
    """(layers, keep, named survivors) of each pruned group, the main one first; checked before training starts, so a
    bad extra group is refused before hours of text and align steps rather than at the joint phase."""
    if design.head_prune_keep is None:
        if design.head_prune_extra:
            raise ValueError("head_prune_extra needs head_prune_keep: the extra groups prune beside the main one")
        return []
    groups = [(tuple(design.head_prune_layers), design.head_prune_keep, tuple(design.head_prune_survivors))]
    groups += [(tuple(layers), keep, ()) for layers, keep in design.head_prune_extra]
    named = [set(layers) for layers, _, _ in groups]
    for i, layers in enumerate(named if design.head_prune_extra else []):  # empty layers would mean all of them
        shared = sorted(layers & set().union(*named[:i]))
        if not layers or shared:
            raise ValueError(f"head_prune_extra {list(design.head_prune_extra)}: every group names its own layers "
                             f"(group {i}: {'shares ' + str(shared) if shared else 'empty'})")
    return groups


def make_pruners(model, design: Design) -> list[head_prune.HeadPruner]:
    """The joint phase's pruners: the main group first (its state is RunState.prune), then each extra group."""
    return [head_prune.HeadPruner(model, layers, keep, design.head_prune_steps, survivors)
            for layers, keep, survivors in prune_groups(design)]


def lr_factor(step: int, steps: int, warmup: int, min_frac: float) -> float:
    """Linear warm-up, then cosine decay to `min_frac` over the phase."""
    if step < warmup:
        return (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, t)))


# ---------------------------------------------------------------- evaluation


class Evaluator:
    """Held-out figures: greedy grounding Acc@0.5 through backend-identical inputs, teacher-forced exact match of
    every text task and VQA kind."""

    def __init__(self, design: Design, maker: BatchMaker, tokenizer, encoder: FastEncoder, with_visual: bool):
        self.tokenizer = tokenizer
        n = design.eval_n
        cfg = design.task_config
        # held-out recall asks one question per example (no practice queries), as the recall probe does
        plain = replace(design, text_config={**design.text_config, "recall_practice": 0})
        fixed = BatchMaker(plain, maker.turns, maker.pixels, EVAL_SEED)
        # seed_key 99: never a training key
        self.text = fixed.text(0, cfg.recall_pairs, batch=4 * n, seed_key=99, mixed=True)
        self.visual = self.grounding = None
        if with_visual:
            scenes = held_out_scenes(design.spec, n, start=200_000)
            self.visual = fixed.visual(0, scenes=scenes, vqa_share=1.0, spec=design.spec)
            self.grounding = prepare(encoder, held_out_scenes(design.spec, n))

    def __call__(self, model) -> dict[str, float]:
        model.eval()
        out = {f"text_{k}": v for k, v in exact_match(model, self.text).items()}
        if self.visual is not None:
            out.update({f"vqa_{k}": v for k, v in exact_match(model, self.visual).items()})
            res = evaluate(model, self.tokenizer, self.grounding)
            out.update(acc50=res.acc50, parse_fail=res.parse_rate)
        model.train()
        return out


# ---------------------------------------------------------------- training


def trainable(design: Design, phase_kind: str, name: str) -> bool:
    """text: the backbone only; align: the vision tower only; joint: everything but `design.joint_frozen`."""
    vision = is_vision_param(name)
    if phase_kind == "joint":
        return vision or not any(part in name for part in design.joint_frozen)
    return (phase_kind == "text") != vision


def base_lr(design: Design, phase_kind: str, vision: bool) -> float:
    """A parameter group's peak rate: the backbone trains at `lm_lr` in the joint phase, everything else at `lr`."""
    return design.lm_lr if (phase_kind == "joint" and not vision) else design.lr


def _param_groups(model, design: Design) -> list[dict]:
    groups: dict[tuple[bool, bool], list] = {}
    for name, p in model.named_parameters():
        decay = p.ndim >= 2 and "embed" not in name
        groups.setdefault((is_vision_param(name), decay), []).append(p)
    return [{"params": ps, "weight_decay": design.weight_decay if decay else 0.0, "vision": vision}
            for (vision, decay), ps in groups.items()]


def phases_of(design: Design) -> list[dict[str, Any]]:
    """The design's phases in order: name, kind (text / align / joint), steps and, for text, tasks and ramp."""
    out, config = [], dict(design.text_config)
    for i, (n, t, r, *more) in enumerate(design.text_phases):
        config |= more[0] if more else {}
        out.append({"name": f"text{i}", "kind": "text", "steps": n, "tasks": tuple(t) or design.text_tasks,
                    "ramp": r, "text_config": dict(config)})
    out.append({"name": "align", "kind": "align", "steps": design.align_steps, "text_config": config})
    out.append({"name": "joint", "kind": "joint", "steps": design.joint_steps, "text_config": config})
    return out


def kept_points(design: Design, points: Sequence[str]) -> set[tuple[str, int]]:
    """The "PHASE:STEP" points of `keep_states` checked against the design's phases and evaluation steps."""
    return run_state.parse_keep_states(points, {p["name"]: p["steps"] for p in phases_of(design)}, design.eval_every)


def train(design: Design, out_dir: str | Path, seed: int, *, backbone: str | Path | None = None,
          init: str | Path | None = None, after: str | None = None, vision_seed: int | None = None,
          threads: int = 1, resume: bool = False, keep_states: Sequence[str] = (),
          log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the design's phases; save the checkpoint, each phase's end state under `phases/<name>/` and, after the
    last text phase, the text-pretrained backbone under `backbone/`.

    `backbone`: load a text-pretrained checkpoint's language weights and run only the visual phases; with
    `vision_seed` (default `seed`: the vision tower's init and the visual data) two VLMs can share one backbone.
    `init` + `after`: continue a run of this design and seed from the checkpoint saved at the end of phase `after`
    (every phase starts a fresh optimizer, and data are functions of (seed, phase, step), so this is exactly the
    uninterrupted run).
    `resume`: continue the unfinished run in `out_dir` (its state is saved at every evaluation) from where it stood,
    bit-equal to the run that was not interrupted; without it an unfinished run there is an error, not overwritten.
    `keep_states`: "PHASE:STEP" evaluation points whose resume state is also kept, as `resume_state_PHASE_STEP.pt`,
    so a later design that is this one until there can continue it (copy it to `resume_state.pt`, `--resume`)
    instead of repeating the steps.
    """
    kept = kept_points(design, keep_states)  # a bad point is refused before anything is written
    prune_groups(design)  # so is a bad pruning group
    torch.set_num_threads(threads)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if run_state.resume_path(out).exists() and not resume:
        raise FileExistsError(f"{out} holds an unfinished run ({run_state.RESUME_FILE}): pass resume=True (--resume) "
                              "to continue it, or choose another output folder")
    state = run_state.load_state(out) if resume else None
    spec = design.spec
    tokenizer = make_tokenizer()
    processor = tiny.make_processor(tokenizer, min_pixels=spec.pixels, max_pixels=spec.pixels)
    vseed = seed if vision_seed is None else vision_seed
    model = build_model(design, tokenizer, seed)
    phases = phases_of(design)
    names = [p["name"] for p in phases]
    if init is not None:
        if after not in names:
            raise ValueError(f"--after must name a phase of design {design.name}: {', '.join(names)}")
        model.load_state_dict(checkpoint_state(init))
        phases = phases[names.index(after) + 1:]
    if backbone is not None:
        load_backbone(model, backbone)
        phases = [p for p in phases if p["kind"] != "text"]
    if vseed != seed and (backbone is not None or init is None):
        model.model.visual.load_state_dict(build_model(design, tokenizer, vseed).model.visual.state_dict())
    encoder = FastEncoder(processor, spec, held_out_scenes(spec, 1)[0])
    turns = TurnEncoder(tokenizer, int(encoder.grid_thw.prod()) // (encoder.merge ** 2), spec.prompt_first)
    maker = BatchMaker(design, turns, encoder, vseed)
    gen = torch.Generator().manual_seed(vseed)
    drop = HeadDrop(model, design.head_drop, gen, design.head_drop_layers, design.head_drop_late_layers)
    n_params = sum(p.numel() for p in model.parameters())
    spec.save(out)
    log_f = (out / "train_log.jsonl").open("a")
    t0 = time.time()
    history: list[dict[str, Any]] = []
    if state is not None:
        left = [p["name"] for p in phases]
        if state.phase not in left:
            raise ValueError(f"resume: phase {state.phase!r} of {out} is not among this call's phases "
                             f"({', '.join(left)}): same design, seed and --backbone/--init?")
        model.load_state_dict(state.model)
        gen.set_state(state.drop_generator)
        phases = phases[left.index(state.phase):]
        history, t0 = list(state.history), time.time() - state.seconds
        logged = [line for line in (out / "train_log.jsonl").read_text().splitlines() if line.strip()]
        if history and (not logged or json.loads(logged[-1]) != history[-1]):  # killed between state and log
            log_f.write(json.dumps(history[-1]) + "\n")
        log(f"[{design.name} seed {seed}/{vseed}] resuming {state.phase} at step {state.step}")
    log(f"[{design.name} seed {seed}/{vseed}] {n_params / 1e6:.2f}M params, phases "
        + ", ".join(f"{p['name']} {p['steps']}" for p in phases))
    pairs = design.task_config.recall_pairs
    last_text = max((i for i, p in enumerate(phases_of(design)) if p["kind"] == "text"), default=None)
    for phase in phases:
        kind, steps, index = phase["kind"], phase["steps"], names.index(phase["name"])
        if steps <= 0:
            continue
        phase_design = replace(design, text_config=phase["text_config"])
        text_maker = BatchMaker(phase_design, turns, encoder, seed)
        evaluator = Evaluator(phase_design, text_maker, tokenizer, encoder, with_visual=kind != "text")
        for name, p in model.named_parameters():
            p.requires_grad_(trainable(design, kind, name))
        opt = torch.optim.AdamW(_param_groups(model, design), lr=design.lr, betas=(0.9, 0.98))
        start = 0
        if state is not None and state.phase == phase["name"]:
            opt.load_state_dict(state.optimizer)
            start = state.step

        def make(step: int, phase=phase, index=index, text_maker=text_maker) -> dict:
            if phase["kind"] == "text":  # phase 0 keeps step numbering from 0; later phases get their own stream
                s = 1_000_000 * index + step
                return text_maker.text(s, text_maker.recall_pairs(step, phase["ramp"]), tasks=phase["tasks"])
            if phase["kind"] == "joint" and np.random.default_rng([seed, step, 5]).random() < design.text_share:
                return text_maker.text(10_000_000 + step, pairs)
            return maker.visual(1_000_000 * index + step,
                                spec=design.scene_spec(design.visual_step(phase["kind"], step)))

        batches = Prefetch(make, start, steps)
        running: list[float] = []
        drop_phase = not design.head_drop_kinds or kind in design.head_drop_kinds
        hooks = design.phase_hooks(model, kind)
        saved_hooks = (state.hooks or []) if start else []
        for i, hook in enumerate(hooks):  # a resumed phase continues each hook's state
            hook.begin(saved_hooks[i] if i < len(saved_hooks) else None)
        pruners = make_pruners(model, design) if kind == "joint" else []
        if start:  # a state from before a group existed (an earlier design's, branched from) leaves it unmeasured
            for pruner, saved in zip(pruners, [state.prune, *(state.prune_extra or [])]):
                if saved is not None:
                    pruner.load(saved)
        for step in range(start, steps):
            batch = next(batches)
            f = lr_factor(step, steps, design.warmup, design.min_lr_frac)
            for g in opt.param_groups:
                g["lr"] = base_lr(design, kind, g["vision"]) * f
            drop.active = drop_phase and step >= design.head_drop_from
            drop.late_active = drop_phase and step >= design.head_drop_late_from
            for pruner in pruners:
                pruner.measure(step)
            logits = answer_logits(model, batch)
            drop.active = drop.late_active = False
            loss = torch.nn.functional.cross_entropy(logits, batch["targets"])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            for pruner in pruners:
                pruner.update()
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], design.grad_clip)
            opt.step()
            for hook in hooks:
                hook.after_step(step, base_lr(design, kind, vision=False) * f)
            for pruner in pruners:
                pruner.prune(step)
            running.append(float(loss.detach()))
            if (step + 1) % design.eval_every == 0 or step + 1 == steps:
                rec = {"phase": phase["name"], "step": step + 1, "loss": float(np.mean(running)),
                       "seconds": time.time() - t0, **evaluator(model)}
                for hook in hooks:
                    rec.update(hook.figures())
                if pruners:
                    rec["pruned_heads"] = [head_name(layer, head) for pruner in pruners
                                           for layer, head in pruner.pruned()]
                running = []
                history.append(rec)
                run_state.save_state(out, run_state.RunState(
                    phase=phase["name"], step=step + 1, model=model.state_dict(), optimizer=opt.state_dict(),
                    drop_generator=gen.get_state(), seconds=time.time() - t0, history=history,
                    hooks=[hook.state() for hook in hooks] or None,
                    prune=pruners[0].state() if pruners else None,
                    prune_extra=[pruner.state() for pruner in pruners[1:]] or None))
                if (phase["name"], step + 1) in kept:
                    run_state.keep_state(out, phase["name"], step + 1)
                log_f.write(json.dumps(rec) + "\n")
                log_f.flush()
                log(f"[{design.name} seed {seed}/{vseed}] " + " ".join(
                    f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in rec.items()))
                save_checkpoint(out, model.eval(), processor, tokenizer)  # the latest weights, for probing mid-run
                model.train()
        model.eval()
        stops = [out / PHASES_DIR / phase["name"]] + ([out / BACKBONE_DIR] if index == last_text else [])
        for folder in stops:  # each a checkpoint the probes and the protocol can load on its own
            save_checkpoint(folder, model, processor, tokenizer)
            spec.save(folder)
            (folder / DESIGN_FILE).write_text(json.dumps(
                {"design": design.to_dict(), "seed": seed, "vision_seed": vseed, "phase": phase["name"]},
                indent=2) + "\n")
        model.train()
    log_f.close()
    model.eval()
    save_checkpoint(out, model, processor, tokenizer)
    run_state.clear_state(out)
    summary = {"design": design.to_dict(), "seed": seed, "vision_seed": vseed,
               "backbone": str(backbone) if backbone else None, "init": str(init) if init else None,
               "after": after, "params": n_params, "seconds": time.time() - t0,
               "final": history[-1] if history else None, "torch_threads": threads, "history": history}
    (out / DESIGN_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def load_demo_model(path: str | Path, dtype: torch.dtype = torch.float32):
    """Model, processor (loaded as the backend loads it, min = max pixels) and spec of a saved demo checkpoint."""
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    spec = DemoSpec.load(path)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(path, dtype=dtype).eval()
    model.set_attn_implementation({"text_config": "sdpa", "vision_config": "sdpa"})
    processor = AutoProcessor.from_pretrained(path, min_pixels=spec.pixels, max_pixels=spec.pixels)
    return model, processor, spec
