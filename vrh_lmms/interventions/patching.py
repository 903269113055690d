"""Activation patching of attention heads: what each head carries from the image to the answer.

Clean input: the image with an expression naming object A; corrupted input: the same image with an expression
naming object B. Both are teacher-forced on an answer (A's box answer, then B's), and the logit difference

    LD = log p(answer_A | input) - log p(answer_B | input)

sums the per-token log-probabilities of the two box answers (their shared prefix cancels exactly; for single-token
answers it is the classic logit difference). A head's output (its slice of the o_proj input) on the answer rows is
copied from one run into the other and the normalised recovery

    (LD_patched - LD_corrupt) / (LD_clean - LD_corrupt)

says how much of the clean behaviour that head alone restores (1 = all of it, 0 = none). Answer rows of the two
runs are aligned by their offset from the end of the prompt, so the prompts may differ in length. Patching every head
of every layer restores the clean answer rows exactly (recovery 1; tests/test_interventions_patching.py), patching a
run's own activations into itself changes nothing (bit for bit).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from vrh_lmms.backbone import Decoder
from vrh_lmms.errors import VRHError
from vrh_lmms.heads.geometry import HeadRef

DIRECTIONS = ("denoise", "noise")  # clean -> corrupted (does the head restore A?) or corrupted -> clean


@dataclass
class TeacherForced:
    """One sample's prompt + answer as a single full forward; the answer rows emit the answer tokens."""

    inputs: dict[str, torch.Tensor]
    prompt_len: int
    answer: torch.Tensor  # (n,) long

    @property
    def rows(self) -> torch.Tensor:
        return torch.arange(self.prompt_len - 1, self.prompt_len - 1 + self.answer.numel())


def teacher_forced(prompt: Mapping[str, torch.Tensor], answer: torch.Tensor) -> TeacherForced:
    """The backend's generate inputs (batch 1) extended by `answer` (1-D ids, without the stop token)."""
    from vrh_lmms.discovery.collector import teacher_forced_inputs

    answer = answer.detach().long().flatten().cpu()
    if answer.numel() == 0:
        raise VRHError("activation patching needs a non-empty answer to teacher-force")
    return TeacherForced(teacher_forced_inputs(dict(prompt), answer), int(prompt["input_ids"].shape[1]), answer)


def answer_logprob(logits: torch.Tensor, tf: TeacherForced) -> float:
    """Sum over answer tokens of log p(token | everything before it), in float64."""
    rows = logits[0, tf.rows.to(logits.device)].double().log_softmax(-1)
    return float(rows.gather(-1, tf.answer.to(logits.device).view(-1, 1)).sum())


@dataclass
class Recording:
    """Every layer's o_proj input on a run's answer rows: (layers, rows, heads * head_dim), and the run's answer
    log-probability."""

    values: torch.Tensor
    logprob: float


@contextmanager
def _o_proj_hooks(decoder: Decoder, hook_for) -> Iterator[None]:
    handles = []
    try:
        for layer, proj in enumerate(decoder.out_projs):
            hook = hook_for(layer)
            if hook is not None:
                handles.append(proj.register_forward_pre_hook(hook))
        yield
    finally:
        for h in handles:
            h.remove()


@torch.no_grad()
def record(model: nn.Module, decoder: Decoder, tf: TeacherForced) -> Recording:
    """Run `tf` once and keep every layer's head outputs on its answer rows."""
    rows = tf.rows
    got: dict[int, torch.Tensor] = {}

    def hook_for(layer):
        def hook(module, args):
            x = args[0]
            got[layer] = x[0, rows.to(x.device)].detach().clone()
        return hook

    with _o_proj_hooks(decoder, hook_for):
        logits = model(**tf.inputs, use_cache=False).logits
    values = torch.stack([got[i].to(got[0].device) for i in range(len(decoder.out_projs))])
    return Recording(values, answer_logprob(logits, tf))


@torch.no_grad()
def patched_logits(model: nn.Module, decoder: Decoder, tf: TeacherForced, heads: Sequence[HeadRef],
                   source: torch.Tensor) -> torch.Tensor:
    """Logits of `tf` with `heads`' o_proj input slices on its answer rows replaced by `source` (layers, rows,
    heads * head_dim), recorded on another run's answer rows with the same answer."""
    if source.shape[1] != tf.answer.numel():
        raise VRHError(f"patch source has {source.shape[1]} answer rows, the run {tf.answer.numel()}")
    d = decoder.geometry.head_dim
    by_layer: dict[int, list[int]] = {}
    for h in heads:
        decoder.geometry.check(h, where="patched head")
        by_layer.setdefault(h.layer, []).append(h.head)
    rows = tf.rows

    def hook_for(layer):
        if layer not in by_layer:
            return None
        cols = torch.cat([torch.arange(h * d, (h + 1) * d) for h in by_layer[layer]])

        def hook(module, args):
            x = args[0].clone()
            r, c = rows.to(x.device), cols.to(x.device)
            x[0, r[:, None], c[None, :]] = source[layer][:, c].to(device=x.device, dtype=x.dtype)
            return (x, *args[1:])
        return hook

    with _o_proj_hooks(decoder, hook_for):
        return model(**tf.inputs, use_cache=False).logits


def patched_logprob(model, decoder, tf: TeacherForced, heads: Sequence[HeadRef], source: torch.Tensor) -> float:
    return answer_logprob(patched_logits(model, decoder, tf, heads, source), tf)


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


def patch_pair(model: nn.Module, decoder: Decoder, clean: Mapping[str, torch.Tensor],
               corrupt: Mapping[str, torch.Tensor], answer_a: torch.Tensor, answer_b: torch.Tensor,
               head_sets: Mapping[str, Sequence[HeadRef]] | None = None, per_head: bool = True,
               direction: str = "denoise") -> PairResult:
    """Patch every single head (and every named head set) of one pair; 4 + 2 x (heads + sets) forwards.

    clean / corrupt: generate inputs (batch 1) of the expressions naming A / B; answer_a / answer_b: the answers
    (ids without the stop token) the model gives to them. direction: "denoise" copies clean activations into the
    corrupted run, "noise" corrupted ones into the clean run; recovery is measured on the same scale either way.
    """
    if direction not in DIRECTIONS:
        raise VRHError(f"patching direction {direction!r}: use one of {', '.join(DIRECTIONS)}")
    runs = {(p, a): teacher_forced(prompt, ans) for p, prompt in (("clean", clean), ("corrupt", corrupt))
            for a, ans in (("a", answer_a), ("b", answer_b))}
    rec = {key: record(model, decoder, tf) for key, tf in runs.items()}
    ld = {p: rec[(p, "a")].logprob - rec[(p, "b")].logprob for p in ("clean", "corrupt")}
    src, dst = ("clean", "corrupt") if direction == "denoise" else ("corrupt", "clean")

    def ld_patched(heads: Sequence[HeadRef]) -> float:
        return (patched_logprob(model, decoder, runs[(dst, "a")], heads, rec[(src, "a")].values)
                - patched_logprob(model, decoder, runs[(dst, "b")], heads, rec[(src, "b")].values))

    g = decoder.geometry
    grid = None
    if per_head:
        grid = np.full((g.layers, g.heads), np.nan)
        for head in g.all_heads():
            grid[head.layer, head.head] = ld_patched([head])
    sets = {name: ld_patched(list(heads)) for name, heads in (head_sets or {}).items()}
    return PairResult(ld["clean"], ld["corrupt"], grid, sets)
