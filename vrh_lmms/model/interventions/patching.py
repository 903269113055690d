"""Activation patching of attention heads: what each head carries from the image to the answer.

Clean input: the image with an expression naming object A; corrupted input: the same image with an expression
naming object B. Both are teacher-forced on an answer (A's box answer, then B's), and the logit difference

    LD = log p(answer_A | input) - log p(answer_B | input)

sums the per-token log-probabilities of the two box answers (their shared prefix cancels exactly; for single-token
answers it is the classic logit difference). A head's output (its slice of the o_proj input) on the answer rows is
copied from one run into the other and the normalised recovery

    (LD_patched - LD_corrupt) / (LD_clean - LD_corrupt)

says how much of the clean behaviour that head alone restores (1 = all of it, 0 = none). That is the denoising
direction (clean activations into the corrupted run). In the noising direction (corrupted activations into the clean
run) the same ratio is 1 for a head that carries nothing, so its effect is measured as the share destroyed

    (LD_clean - LD_patched) / (LD_clean - LD_corrupt)

(1 = patching that head alone wipes out the clean behaviour, 0 = it changes nothing). In both directions a larger
effect means the head carries more of the difference (`MEASURES`, `PairResult.effect`). Answer rows of the two
runs are aligned by their offset from the end of the prompt, so the prompts may differ in length. Patching every head
of every layer restores the clean answer rows exactly (recovery 1;
tests/integration/test_interventions_patching.py), patching a run's own activations into itself changes nothing (bit
for bit).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import HeadRef
from vrh_lmms.model.backbone import HEAD_OUT, Decoder, Hook, site_name
from vrh_lmms.model.head_view import per_head

DIRECTIONS = ("denoise", "noise")  # clean -> corrupted (does the head restore A?) or corrupted -> clean
MEASURES = {"denoise": "recovery", "noise": "destroyed"}  # what a direction's effect is called (module docstring)


@dataclass
class TeacherForced:
    """One sample's prompt + answer as a single full forward; the answer rows emit the answer tokens."""

    inputs: dict[str, torch.Tensor]
    prompt_len: int
    answer: torch.Tensor  # (n,) long
    _encoded: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def rows(self) -> torch.Tensor:
        return torch.arange(self.prompt_len - 1, self.prompt_len - 1 + self.answer.numel())

    def batch(self, model: nn.Module, size: int) -> dict[str, Any]:
        """The forward's inputs repeated `size` times.

        Where the model takes pre-encoded images (`mm_encoder_outputs`, transformers' generate path), the vision
        tower runs once per sample and generate's own expansion repeats every input correctly for the family; other
        models get their raw inputs, one row only."""
        if self._encoded is None:
            self._encoded = encode_images(model, self.inputs)
        if "mm_encoder_outputs" not in self._encoded:
            if size != 1:
                raise VRHError(f"{type(model).__name__} takes no pre-encoded images; patch with batch size 1")
            return dict(self._encoded)
        kwargs = {k: v for k, v in self._encoded.items() if k != "input_ids"}
        kwargs["mm_encoder_outputs"] = {m: copy.copy(o) for m, o in kwargs["mm_encoder_outputs"].items()}
        if size == 1:
            return {"input_ids": self._encoded["input_ids"], **kwargs}
        ids, kwargs = model._expand_inputs_for_generation(expand_size=size, input_ids=self._encoded["input_ids"],
                                                          **kwargs)
        return {"input_ids": ids, **kwargs}


def encode_images(model: nn.Module, inputs: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """`inputs` with the pixels replaced by the vision tower's output (when the model accepts it; the forward is
    then bit-identical, tests/integration/test_interventions_patching.py). Grid and size metadata stay: positions
    need them."""
    supports = getattr(model, "_supports_mm_encoder_outputs", None)
    if supports is None or not supports():
        return dict(inputs)
    rest = {k: v for k, v in inputs.items() if k != "input_ids"}
    with torch.no_grad():
        encoded = model._prepare_multimodal_encoder_kwargs_for_generation(dict(rest))
    if not encoded.get("mm_encoder_outputs"):
        return dict(inputs)
    for key in set(rest) - set(encoded):
        if "pixel" not in key:
            encoded[key] = rest[key]
    return {"input_ids": inputs["input_ids"], **encoded}


def teacher_forced(prompt: Mapping[str, torch.Tensor], answer: torch.Tensor) -> TeacherForced:
    """The backend's generate inputs (batch 1) extended by `answer` (1-D ids, without the stop token)."""
    # deferred: keeps `vrh-lmms patch --help` free of transformers
    from vrh_lmms.model.capture.teacher_forced import teacher_forced_inputs

    answer = answer.detach().long().flatten().cpu()
    if answer.numel() == 0:
        raise VRHError("activation patching needs a non-empty answer to teacher-force")
    return TeacherForced(teacher_forced_inputs(dict(prompt), answer), int(prompt["input_ids"].shape[1]), answer)


def answer_logprobs(logits: torch.Tensor, tf: TeacherForced) -> list[float]:
    """Per batch row: sum over answer tokens of log p(token | everything before it), in float64."""
    rows = logits[:, tf.rows.to(logits.device)].double().log_softmax(-1)
    answer = tf.answer.to(logits.device).view(1, -1, 1).expand(rows.shape[0], -1, 1)
    return rows.gather(-1, answer)[..., 0].sum(-1).tolist()


def answer_logprob(logits: torch.Tensor, tf: TeacherForced) -> float:
    return answer_logprobs(logits[:1], tf)[0]


@dataclass
class Recording:
    """Every layer's o_proj input on a run's answer rows: (layers, rows, heads * widest head), a layer's own
    heads * dim(layer) entries first (zeros after them, and in a layer without heads), and the run's answer
    log-probability."""

    values: torch.Tensor
    logprob: float


def _head_out_hooks(decoder: Decoder, hook_for) -> list[Hook]:
    """One hook on each layer's per-head output site (`layers.L.head_out`) that `hook_for(L)` gives one for."""
    hooks = []
    for layer in decoder.geometry.attention_layers:
        fn = hook_for(layer)
        if fn is not None:
            hooks.append(Hook(site_name(layer, HEAD_OUT), fn))
    return hooks


@torch.no_grad()
def record(model: nn.Module, decoder: Decoder, tf: TeacherForced) -> Recording:
    """Run `tf` once and keep every layer's head outputs on its answer rows."""
    rows = tf.rows
    got: dict[int, torch.Tensor] = {}

    def hook_for(layer):
        def hook(x):
            got[layer] = x[0, rows.to(x.device)].detach().clone()
        return hook

    with decoder.hooks(_head_out_hooks(decoder, hook_for)):
        logits = model(**tf.batch(model, 1), use_cache=False).logits
    g = decoder.geometry
    first = got[g.attention_layers[0]]
    values = first.new_zeros(g.layers, first.shape[0], g.heads * g.max_head_dim)
    for layer, x in got.items():
        values[layer, :, :x.shape[-1]] = x.to(values.device)
    return Recording(values, answer_logprob(logits, tf))


@torch.no_grad()
def patched_batch_logits(model: nn.Module, decoder: Decoder, tf: TeacherForced,
                         groups: Sequence[Sequence[HeadRef]], source: torch.Tensor) -> torch.Tensor:
    """Logits (len(groups), T, vocab) of `tf`, batch row j with the o_proj input slices of `groups[j]` on its answer
    rows replaced by `source` (layers, rows, heads * head_dim), recorded on another run with the same answer."""
    if source.shape[1] != tf.answer.numel():
        raise VRHError(f"patch source has {source.shape[1]} answer rows, the run {tf.answer.numel()}")
    g = decoder.geometry
    columns = torch.zeros(g.layers, len(groups), g.heads * g.max_head_dim, dtype=torch.bool)
    for j, heads in enumerate(groups):
        for h in heads:
            g.check(h, where="patched head")
            d = g.dim(h.layer)
            per_head(columns[h.layer, j, :g.heads * d], d)[h.head] = True
    rows = tf.rows

    def hook_for(layer):
        if not columns[layer].any():
            return None

        def hook(x):
            x = x.clone()
            r = rows.to(x.device)
            width = x.shape[-1]  # heads * dim(layer)
            cols = columns[layer, :, :width].to(x.device)[:, None, :]  # (B, 1, width)
            x[:, r] = torch.where(cols, source[layer, :, :width].to(device=x.device, dtype=x.dtype)[None], x[:, r])
            return x
        return hook

    with decoder.hooks(_head_out_hooks(decoder, hook_for)):
        return model(**tf.batch(model, len(groups)), use_cache=False).logits


def patched_logits(model: nn.Module, decoder: Decoder, tf: TeacherForced, heads: Sequence[HeadRef],
                   source: torch.Tensor) -> torch.Tensor:
    """Logits of `tf` with `heads` patched from `source` (one batch row)."""
    return patched_batch_logits(model, decoder, tf, [list(heads)], source)


def patched_logprobs(model, decoder, tf: TeacherForced, groups: Sequence[Sequence[HeadRef]], source: torch.Tensor,
                     batch_size: int = 8) -> list[float]:
    """Answer log-probability of `tf` with each group of heads patched, `batch_size` groups per forward."""
    out: list[float] = []
    for start in range(0, len(groups), max(1, batch_size)):
        chunk = groups[start:start + max(1, batch_size)]
        out += answer_logprobs(patched_batch_logits(model, decoder, tf, chunk, source), tf)
    return out


@dataclass
class PairResult:
    """One (A, B) pair: LD of the clean and corrupted runs, and LD after patching each head / each head set."""

    ld_clean: float
    ld_corrupt: float
    heads: np.ndarray | None  # (layers, heads) LD_patched, NaN where not computed
    sets: dict[str, float] = field(default_factory=dict)

    @property
    def gap(self) -> float:
        return self.ld_clean - self.ld_corrupt

    def recovery(self, ld_patched):
        return (np.asarray(ld_patched, dtype=float) - self.ld_corrupt) / self.gap

    def destroyed(self, ld_patched):
        return (self.ld_clean - np.asarray(ld_patched, dtype=float)) / self.gap

    def effect(self, ld_patched, direction: str):
        """The direction's effect (MEASURES): recovery when denoising, the share destroyed when noising."""
        return self.recovery(ld_patched) if direction == "denoise" else self.destroyed(ld_patched)


def patch_pair(model: nn.Module, decoder: Decoder, clean: Mapping[str, torch.Tensor],
               corrupt: Mapping[str, torch.Tensor], answer_a: torch.Tensor, answer_b: torch.Tensor,
               head_sets: Mapping[str, Sequence[HeadRef]] | None = None, per_head: bool = True,
               direction: str = "denoise", batch_size: int = 8) -> PairResult:
    """Patch every single head (and every named head set) of one pair: 4 forwards, then 2 x (heads + sets) patched
    rows in forwards of `batch_size` rows.

    clean / corrupt: generate inputs (batch 1) of the expressions naming A / B; answer_a / answer_b: the answers
    (ids without the stop token) the model gives to them. direction: "denoise" copies clean activations into the
    corrupted run, "noise" corrupted ones into the clean run (`PairResult.effect` reads either on its own scale).
    """
    if direction not in DIRECTIONS:
        raise VRHError(f"patching direction {direction!r}: use one of {', '.join(DIRECTIONS)}")
    runs = {(p, a): teacher_forced(prompt, ans) for p, prompt in (("clean", clean), ("corrupt", corrupt))
            for a, ans in (("a", answer_a), ("b", answer_b))}
    rec = {key: record(model, decoder, tf) for key, tf in runs.items()}
    ld = {p: rec[(p, "a")].logprob - rec[(p, "b")].logprob for p in ("clean", "corrupt")}
    src, dst = ("clean", "corrupt") if direction == "denoise" else ("corrupt", "clean")
    g = decoder.geometry
    names = list(head_sets or {})
    groups = [[h] for h in g.all_heads()] if per_head else []
    groups += [list((head_sets or {})[n]) for n in names]
    lp = {a: patched_logprobs(model, decoder, runs[(dst, a)], groups, rec[(src, a)].values, batch_size)
          for a in ("a", "b")}
    patched = np.asarray(lp["a"]) - np.asarray(lp["b"])
    grid = None
    if per_head:  # (layers, heads); NaN in a layer without heads (a hybrid decoder's linear-attention layers)
        grid = np.full((g.layers, g.heads), np.nan)
        grid[list(g.attention_layers)] = patched[:g.total_heads].reshape(len(g.attention_layers), g.heads)
    offset = g.total_heads if per_head else 0
    sets = {n: float(patched[offset + i]) for i, n in enumerate(names)}
    return PairResult(ld["clean"], ld["corrupt"], grid, sets)
