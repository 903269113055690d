"""Which sequence positions are the query rows of each query set.

For a teacher-forced sequence `prompt + answer`, the row that *emits* answer token t sits one position earlier
(the decoding step that produced it). `out` = those rows for every answer token; `out_coords` = the rows emitting
tokens that carry digits (coordinates, PaliGemma's <locNNNN>); `in` = the referring expression's own tokens in the
prompt, found by matching the decoded text so it works for any tokenizer; `out_random1` = one `out` row drawn at
random, seeded by the doc key so reruns agree (paper Fig 8b); `in+out` = the union of `in` and `out` (Table A8).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

_STRIP = re.compile(r"[\sĠ▁Ċ]+")


def _norm(text: str) -> str:
    return _STRIP.sub("", text).lower()


def answer_length(answer_ids: Sequence[int], stop_ids: set[int]) -> int:
    """Tokens of the answer proper: up to (not including) the first stop/pad token."""
    for i, t in enumerate(answer_ids):
        if int(t) in stop_ids:
            return i
    return len(answer_ids)


def out_rows(prompt_len: int, n_answer: int) -> list[int]:
    return [prompt_len - 1 + i for i in range(n_answer)]


def coord_rows(prompt_len: int, answer_pieces: Sequence[str]) -> list[int]:
    return [prompt_len - 1 + i for i, piece in enumerate(answer_pieces) if any(c.isdigit() for c in piece)]


def expression_rows(pieces: Sequence[str], expression: str, limit: int | None = None) -> list[int]:
    """Positions of the tokens spelling `expression` (last occurrence within the first `limit` tokens)."""
    target = _norm(expression)
    if not target:
        return []
    text, owner = [], []
    for i, piece in enumerate(pieces[:limit]):
        for ch in _norm(piece):
            text.append(ch)
            owner.append(i)
    joined = "".join(text)
    start = joined.rfind(target)
    if start < 0:
        return []
    span = owner[start:start + len(target)]
    return list(range(span[0], span[-1] + 1))  # whitespace-only tokens inside the span belong to it


def token_pieces(tokenizer, ids: Sequence[int]) -> list[str]:
    """Each token's own text (special tokens included), for matching and for spotting digits."""
    return [tokenizer.decode([int(t)], skip_special_tokens=False) for t in ids]


def random_row(rows: Sequence[int], key: str) -> list[int]:
    """One of `rows`, drawn with a generator seeded by the doc key (sha256), so every rerun draws the same one."""
    if not rows:
        return []
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")
    return [int(rows[int(np.random.default_rng(seed).integers(len(rows)))])]


def union_rows(*sets: Sequence[int]) -> list[int]:
    return sorted({int(r) for rows in sets for r in rows})
