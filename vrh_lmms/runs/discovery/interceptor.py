"""See what an lmms-eval backend sees: which doc it is answering and the exact inputs it hands to `generate`.

Discovery must score heads on the same prompt and preprocessing the backend uses for evaluation, for every
backend, without copying any backend's input code. Two light interceptions give us that:
- `DocTracker` stands in for `lm.task_dict`; backends look docs up as `task_dict[task][split][doc_id]` right
  before generating (the lmms-eval convention), so the last lookup names the doc being answered (batch size 1).
- `GenerateInterceptor` replaces `model.generate` on the model instance: it passes through, then hands the inputs
  and the generated ids to a callback. For a doc already processed in an earlier run it returns the stored ids
  without running the model, so a resumed discovery reproduces the same answers at no cost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from vrh_lmms.base.errors import VRHError


@dataclass(frozen=True)
class DocContext:
    task: str
    split: str
    doc_id: int
    doc: Any

    @property
    def key(self) -> str:
        return f"{self.task}__{self.split}__{self.doc_id}"


def parse_key(key: str) -> tuple[str, str, int]:
    """(task, split, doc_id) of a `DocContext.key` (how parts and the samples file name their docs)."""
    task, split, doc_id = key.rsplit("__", 2)
    return task, split, int(doc_id)


class _DocView:
    def __init__(self, tracker: DocTracker, task: str, split: str, data: Any) -> None:
        self._tracker, self._task, self._split, self._data = tracker, task, split, data

    def __getitem__(self, doc_id):
        doc = self._data[doc_id]
        if isinstance(doc_id, int):
            self._tracker.last = DocContext(self._task, self._split, doc_id, doc)
        return doc

    def __len__(self) -> int:
        return len(self._data)

    def __getattr__(self, name: str):
        return getattr(self._data, name)


class _SplitView:
    def __init__(self, tracker: DocTracker, task: str, splits: Any) -> None:
        self._tracker, self._task, self._splits = tracker, task, splits

    def __getitem__(self, split: str) -> _DocView:
        return _DocView(self._tracker, self._task, split, self._splits[split])

    def __contains__(self, split: str) -> bool:
        return split in self._splits

    def __iter__(self) -> Iterator:
        return iter(self._splits)

    def __getattr__(self, name: str):
        return getattr(self._splits, name)


class DocTracker(dict):
    """A `task_dict` that remembers the last doc looked up."""

    last: DocContext | None = None

    def __getitem__(self, task: str) -> _SplitView:
        return _SplitView(self, task, super().__getitem__(task))


class GenerateWrapper:
    """Replaces `model.generate` on one model instance by `self._generate` (which can call `self._original`);
    `uninstall()` puts the original back."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self._original = model.generate
        model.generate = self._generate  # instance attribute shadows the class method

    def uninstall(self) -> None:
        if self.model.__dict__.get("generate") is not None:
            del self.model.generate

    def _generate(self, *args, **kwargs):
        raise NotImplementedError


class GenerateInterceptor(GenerateWrapper):
    """Discovery's `model.generate`: hands every generation (or a cached answer) to its collector."""

    def __init__(self, model: torch.nn.Module, tracker: DocTracker,
                 on_generated: Callable[[DocContext, dict[str, torch.Tensor], torch.Tensor, bool], None],
                 cached_answer: Callable[[DocContext], tuple[torch.Tensor, bool] | None]) -> None:
        self.tracker = tracker
        self.on_generated, self.cached_answer = on_generated, cached_answer
        self.error: VRHError | None = None  # the first error of a doc, re-raised once the evaluation returns
        super().__init__(model)

    def _generate(self, *args, **kwargs):
        if args:
            raise VRHError("discovery expects the backend to call model.generate(**inputs) with keyword tensors")
        ctx = self.tracker.last
        if ctx is None:
            raise VRHError("discovery could not tell which doc the backend is answering (no task_dict lookup)")
        input_ids = kwargs.get("input_ids")
        if input_ids is None or input_ids.shape[0] != 1:
            raise VRHError("discovery runs with batch_size 1 (one doc per generate call)")
        tensors = {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
        cached = self.cached_answer(ctx)
        if cached is not None:
            answer, with_prompt = cached
            answer = answer.to(input_ids.device).view(1, -1)
            return torch.cat([input_ids, answer], dim=1) if with_prompt else answer
        output = self._original(*args, **kwargs)
        sequences = output.sequences if hasattr(output, "sequences") else output
        prompt_len = input_ids.shape[1]
        # HF generate returns prompt + answer; models that generate from inputs_embeds (remote InternVL) return
        # only the answer. Either way the callback gets the answer, and a replay returns the same shape.
        with_prompt = sequences.shape[1] >= prompt_len and torch.equal(
            sequences[0, :prompt_len].to(input_ids.device), input_ids[0])
        answer = sequences[0, prompt_len:] if with_prompt else sequences[0]
        try:
            self.on_generated(ctx, tensors, answer.detach(), with_prompt)
        except VRHError as exc:  # lmms-eval's internvl_hf logs and swallows errors raised in generate: keep it
            self.error = self.error or exc
            raise
        return output
