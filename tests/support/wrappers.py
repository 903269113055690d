"""Support for the wrapper tests (no tests here): hand-built lmms-eval requests and a recorder of what a backend
passes to `model.generate`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from lmms_eval.api.instance import Instance

from vrh_lmms.base.synth.scenes import SceneConfig, generate_scene

TASK, SPLIT = "vrh_test_synth", "test"


def scene_docs(n: int = 3, seed: int = 0, size: int = 112) -> dict[int, dict[str, Any]]:
    """Synthetic scenes with prompts of different lengths (so batches really get padded)."""
    docs = {}
    for i in range(n):
        s = generate_scene(i, seed, SceneConfig(image_size=size, min_size=16, max_size=40))
        docs[i] = {"image": s.image, "expression": s.expression + " on the left" * i}
    return docs


def _prompt(doc: dict[str, Any]) -> str:
    return f"Locate {doc['expression']} in the image."


def requests(docs: dict[int, dict[str, Any]], chat: bool, max_new_tokens: int = 6) -> list[Instance]:
    """generate_until requests in the simple or chat argument layout (fresh gen_kwargs each: backends mutate them)."""
    out = []
    for doc_id, doc in docs.items():
        gen = {"max_new_tokens": max_new_tokens, "temperature": 0, "until": ["\n\n"]}
        if chat:
            def to_messages(d):
                return [{"role": "user", "content": [{"type": "image", "url": d["image"]},
                                                     {"type": "text", "text": _prompt(d)}]}]

            args = (_prompt(doc), to_messages, gen, doc_id, TASK, SPLIT)
        else:
            args = (_prompt(doc), gen, lambda d: [d["image"]], doc_id, TASK, SPLIT)
        out.append(Instance(request_type="generate_until", arguments=args, idx=0,
                            metadata={"task": TASK, "doc_id": doc_id, "repeats": 1}))
    return out


def run(backend, docs: dict[int, dict[str, Any]], max_new_tokens: int = 6) -> list[str]:
    """Texts the backend generates for `docs`, in request order."""
    backend.task_dict = {TASK: {SPLIT: docs}}
    outs = backend.generate_until(requests(docs, chat=not backend.is_simple, max_new_tokens=max_new_tokens))
    return [getattr(o, "text", o) for o in outs]


@contextlib.contextmanager
def recorded_generate(model) -> Iterator[list[dict[str, Any]]]:
    """Record the keyword arguments of every `model.generate` call (the interception discovery relies on)."""
    calls: list[dict[str, Any]] = []
    original = model.generate

    def generate(*args, **kwargs):
        assert not args, "backends must call generate with keyword inputs only"
        calls.append(dict(kwargs))
        return original(**kwargs)

    model.generate = generate
    try:
        yield calls
    finally:
        del model.generate


def model_inputs(call: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The tensor inputs of a recorded generate call (generation settings dropped)."""
    return {k: v for k, v in call.items() if isinstance(v, torch.Tensor)}


def last_logits_by_prompt(model, calls: list[dict[str, Any]]) -> dict[tuple[int, ...], torch.Tensor]:
    """Next-token logits after each prompt, keyed by the prompt's unpadded token ids (batch position free)."""
    out = {}
    for call in calls:
        inputs = model_inputs(call)
        with torch.no_grad():
            logits = model(**inputs).logits[:, -1].float()
        mask = inputs.get("attention_mask", torch.ones_like(inputs["input_ids"])).bool()
        for row in range(inputs["input_ids"].shape[0]):
            out[tuple(inputs["input_ids"][row][mask[row]].tolist())] = logits[row]
    return out


def assert_batch_two_equals_one(make_backend, docs: dict[int, dict[str, Any]]) -> None:
    """`make_backend(batch_size)` answers `docs` in left-padded batches of 2 exactly as one at a time: the same
    texts and, per prompt, the same next-token logits."""
    texts, logits = {}, {}
    for bs in (1, 2):
        backend = make_backend(bs)
        with recorded_generate(backend.model) as calls:
            texts[bs] = run(backend, docs)
        if bs == 2:
            assert max(c["input_ids"].shape[0] for c in calls) == 2
            mask = next(c["attention_mask"] for c in calls if c["input_ids"].shape[0] == 2)
            assert not mask[:, 0].all() and mask[:, -1].all(), "batches must be left padded"
        logits[bs] = last_logits_by_prompt(backend.model, calls)
    assert texts[2] == texts[1]
    assert logits[1].keys() == logits[2].keys()
    for key in logits[1]:
        torch.testing.assert_close(logits[2][key], logits[1][key], rtol=1e-4, atol=1e-4)
