"""Synthetic text tasks that pretrain the demo model's language backbone before it ever sees an image.

Real VLMs inherit their retrieval heads from the language model's text pretraining; a tiny model trained on one
grounding task from scratch has every head working on that task. These tasks give the backbone several jobs, each
solved by its own kind of head: associative recall (`recall`, the task on which retrieval heads are known to
emerge), a textual twin of grounding (`records`: find the record a description names and emit its box in the
grounding answer format), copying, sorting, counting and addition. Every example is a pure function of its seed.

Prompts are lists of words: the demo tokenizer is word-level, so word i of a prompt is exactly one token, and
`Example.targets` can name the positions a retrieval head should attend to (the queried key and its value).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

TEXT_TASKS: tuple[str, ...] = ("recall", "records", "copy", "sort", "count", "add")
# Keys of the recall task: letters, each one token of the demo tokenizer (see `extra_words`).
RECALL_KEYS: tuple[str, ...] = tuple("bcdefghjklmnopqrstuvwz")
COUNT_WORDS: tuple[str, ...] = ("red", "green", "blue", "yellow", "white", "purple")
RECORD_COLOURS: tuple[str, ...] = ("red", "green", "blue", "yellow", "white", "purple")
RECORD_SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "cross", "diamond")


def extra_words() -> tuple[str, ...]:
    """Words the text tasks need beyond the tiny tokenizer's base vocabulary."""
    return (*RECALL_KEYS, "recall", "key", "copy", "sort", "add", "list")


@dataclass(frozen=True)
class Example:
    task: str
    prompt: list[str]  # the user turn, one word per token
    answer: list[str]  # the assistant's answer tokens (the stop token is added by the encoder)
    targets: list[int] = field(default_factory=list)  # prompt word indices a retrieval head should read
    prompt_loss: list[int] = field(default_factory=list)  # prompt word indices that are also predicted (training)


@dataclass(frozen=True)
class TextTaskConfig:
    """Sizes of the text tasks. `recall_pairs` is the largest number of key-value pairs (curricula lower it)."""

    recall_pairs: int = 8
    recall_practice: int = 0  # practice queries per recall example (multi-query recall in the prompt)
    # True: the answer restates the key before its value (`kq vq`), so the value is predicted at a key token, as
    # the practice queries are; False: the answer is the value alone
    recall_restate: bool = False
    recall_keys: int = 0  # size of the key alphabet (0: all RECALL_KEYS)
    recall_value_max: int = 0  # largest recall value (0: value_max)
    value_max: int = 99
    copy_len: tuple[int, int] = (3, 7)
    sort_len: tuple[int, int] = (3, 6)
    count_len: tuple[int, int] = (3, 9)
    add_max: int = 50
    records: tuple[int, int] = (3, 6)
    grid: int = 6  # records sit on the cells of a grid x grid board of `cell`-pixel cells, as the scenes' objects
    cell: int = 28


def recall(rng: np.random.Generator, cfg: TextTaskConfig, pairs: int | None = None, practice: int | None = None
           ) -> Example:
    """`recall : k1 v1 , k2 v2 , ... . ka va kb vb ... key kq ?` -> `vq` or `kq vq` (distinct keys).

    The practice queries `ka va ...` (keys other than kq, drawn with replacement; `practice` of them, default
    `cfg.recall_practice`) are multi-query associative recall inside the prompt: their values are predicted too
    (`prompt_loss`), so every example carries many recall targets instead of one.
    """
    n = int(pairs or rng.integers(2, cfg.recall_pairs + 1))
    pool = RECALL_KEYS[: cfg.recall_keys or len(RECALL_KEYS)]
    keys = [pool[i] for i in rng.choice(len(pool), size=n, replace=False)]
    values = [str(v) for v in rng.integers(0, (cfg.recall_value_max or cfg.value_max) + 1, size=n)]
    q = int(rng.integers(n))
    words = ["recall", ":"]
    targets = []
    for i, (k, v) in enumerate(zip(keys, values)):
        if i:
            words.append(",")
        if i == q:
            targets = [len(words), len(words) + 1]
        words += [k, v]
    words.append(".")
    loss = []
    others = [i for i in range(n) if i != q]
    m = cfg.recall_practice if practice is None else practice
    for i in (rng.choice(others, size=m) if others and m else []):
        words.append(keys[int(i)])
        loss.append(len(words))
        words.append(values[int(i)])
    words += ["key", keys[q], "?"]
    answer = [keys[q], values[q]] if cfg.recall_restate else [values[q]]
    return Example("recall", words, answer, targets, loss)


def records(rng: np.random.Generator, cfg: TextTaskConfig) -> Example:
    """The textual twin of grounding: `list : red circle 56 84 , ... . locate the blue square in the list and
    output its bbox coordinates in json format .` -> `[ x1 , y1 , x2 , y2 ]`. Distractors share the referent's
    colour or shape, as in the scenes."""
    n = int(rng.integers(cfg.records[0], cfg.records[1] + 1))
    colour, shape = str(rng.choice(RECORD_COLOURS)), str(rng.choice(RECORD_SHAPES))
    attrs = [(colour, shape)]
    while len(attrs) < n:
        if rng.random() < 0.5:
            cand = (str(rng.choice(RECORD_COLOURS)), shape)
        else:
            cand = (colour, str(rng.choice(RECORD_SHAPES)))
        if cand not in attrs:
            attrs.append(cand)
    cells = rng.choice(cfg.grid * cfg.grid, size=n, replace=False)
    order = rng.permutation(n)
    words = ["list", ":"]
    targets: list[int] = []
    box: list[int] = []
    for j, i in enumerate(order):
        if j:
            words.append(",")
        x, y = int(cells[i] % cfg.grid) * cfg.cell, int(cells[i] // cfg.grid) * cfg.cell
        if i == 0:
            targets = list(range(len(words), len(words) + 4))
            box = [x, y, x + cfg.cell, y + cfg.cell]
        words += [attrs[i][0], attrs[i][1], str(x), str(y)]
    words += [".", "locate", "the", colour, shape, "in", "the", "list", "and", "output", "its", "bbox",
              "coordinates", "in", "json", "format", "."]
    answer = ["[", str(box[0]), ",", str(box[1]), ",", str(box[2]), ",", str(box[3]), "]"]
    return Example("records", words, answer, targets)


def copy(rng: np.random.Generator, cfg: TextTaskConfig) -> Example:
    n = int(rng.integers(cfg.copy_len[0], cfg.copy_len[1] + 1))
    seq = [str(v) for v in rng.integers(0, cfg.value_max + 1, size=n)]
    return Example("copy", ["copy", ":", *seq], seq)


def sort(rng: np.random.Generator, cfg: TextTaskConfig) -> Example:
    n = int(rng.integers(cfg.sort_len[0], cfg.sort_len[1] + 1))
    vals = rng.choice(cfg.value_max + 1, size=n, replace=False)
    return Example("sort", ["sort", ":", *map(str, vals)], [str(v) for v in sorted(vals)])


def count(rng: np.random.Generator, cfg: TextTaskConfig) -> Example:
    n = int(rng.integers(cfg.count_len[0], cfg.count_len[1] + 1))
    items = [str(w) for w in rng.choice(COUNT_WORDS, size=n)]
    word = str(rng.choice(items)) if rng.random() < 0.85 else str(rng.choice(COUNT_WORDS))
    return Example("count", ["count", word, ":", *items], [str(items.count(word))])


def add(rng: np.random.Generator, cfg: TextTaskConfig) -> Example:
    a, b = (int(v) for v in rng.integers(0, cfg.add_max + 1, size=2))
    return Example("add", ["add", str(a), "+", str(b), "="], [str(a + b)])


def make_example(task: str, rng: np.random.Generator, cfg: TextTaskConfig, recall_pairs: int | None = None
                 ) -> Example:
    if task == "recall":
        return recall(rng, cfg, recall_pairs)
    makers = {"records": records, "copy": copy, "sort": sort, "count": count, "add": add}
    if task not in makers:
        raise ValueError(f"unknown text task {task!r}; known: {', '.join(TEXT_TASKS)}")
    return makers[task](rng, cfg)


def sample_examples(seed: Sequence[int], n: int, tasks: Sequence[str], cfg: TextTaskConfig,
                    max_recall_pairs: int | None = None) -> list[Example]:
    """n examples of tasks drawn uniformly from `tasks`; recall uses 2..max_recall_pairs pairs (curriculum)."""
    rng = np.random.default_rng(list(seed))
    out = []
    for _ in range(n):
        task = str(tasks[int(rng.integers(len(tasks)))]) if len(tasks) > 1 else str(tasks[0])
        pairs = None
        if task == "recall" and max_recall_pairs is not None:
            pairs = int(rng.integers(2, max(2, max_recall_pairs) + 1))
        out.append(make_example(task, rng, cfg, pairs))
    return out
