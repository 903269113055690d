"""Text-span evidence: the prompt tokens that spell a needle string, found exactly in the ids the backend fed.

A doc whose evidence is a span of its prompt text (`vrh_evidence = {"kind": "text", "text": <needle>}`) is scored on
those tokens instead of a box's image tokens. The ids are decoded with the chat template and every special token
included, re-encoded by the fast tokenizer with `return_offsets_mapping` (and refused unless the re-encoding gives
the very same ids, so the offsets describe the fed sequence), the needle is located in the decoded text, and its
characters map to the tokens whose offsets overlap them. No whitespace or case folding: a needle the decoded prompt
does not spell verbatim is refused, as is one it spells more than once without `start` to choose.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model.capture.layouts import image_token_map
from vrh_lmms.runs.discovery.evidence import KIND_TEXT, EvidenceKeys, EvidenceKind, register_evidence
from vrh_lmms.runs.discovery.targets import _image_size, doc_image_id


@dataclass(frozen=True)
class TextEvidence:
    """A needle string; `start`: its char offset in `context` (the question text), when the needle repeats."""

    text: str
    start: int | None = None
    context: str | None = None
    query: str = ""  # the question's own words: the `in` query rows (as a box's referring expression)


def text_evidence(doc: Mapping[str, Any], where: str = "doc") -> TextEvidence:
    ev = doc["vrh_evidence"]
    text = ev.get("text")
    if not isinstance(text, str) or not text:
        raise VRHError(f"{where}: vrh_evidence of kind text needs a non-empty `text` (the needle)")
    start = ev.get("start")
    if start is not None and not isinstance(ev.get("context"), str):
        raise VRHError(f"{where}: vrh_evidence `start` needs `context`, the text the offset counts in")
    return TextEvidence(text, None if start is None else int(start), ev.get("context"), str(ev.get("query") or ""))


def token_offsets(tokenizer, ids: Sequence[int]) -> tuple[str, list[tuple[int, int]]]:
    """The decoded text of `ids` and each token's (start, end) chars in it, from the fast tokenizer's offsets."""
    ids = [int(t) for t in ids]
    if not getattr(tokenizer, "is_fast", False):
        raise VRHError(f"{type(tokenizer).__name__} is not a fast tokenizer; text spans need its offsets")
    text = tokenizer.decode(ids, skip_special_tokens=False)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if list(enc["input_ids"]) != ids:
        raise VRHError(f"{type(tokenizer).__name__} does not re-encode the decoded prompt to the fed ids; "
                       f"cannot map text-span evidence to tokens exactly")
    return text, [(int(a), int(b)) for a, b in enc["offset_mapping"]]


def _find_all(text: str, needle: str) -> list[int]:
    out, at = [], text.find(needle)
    while at >= 0:
        out.append(at)
        at = text.find(needle, at + 1)
    return out


def needle_chars(text: str, evidence: TextEvidence) -> tuple[int, int]:
    """(start, end) chars of the needle in the decoded prompt `text`; refuses an absent or ambiguous needle."""
    needle = evidence.text
    if evidence.start is not None:
        ctx = evidence.context or ""
        if ctx[evidence.start:evidence.start + len(needle)] != needle:
            raise VRHError(f"vrh_evidence start {evidence.start} does not point at {needle!r} in its context")
        hits = _find_all(text, ctx)
        if len(hits) != 1:
            raise VRHError(f"the prompt spells the evidence context {len(hits)} times, not once; cannot place "
                           f"the needle {needle!r}")
        begin = hits[0] + evidence.start
        return begin, begin + len(needle)
    hits = _find_all(text, needle)
    if not hits:
        raise VRHError(f"the prompt does not contain the needle {needle!r}")
    if len(hits) > 1:
        raise VRHError(f"the needle {needle!r} occurs {len(hits)} times in the prompt; give vrh_evidence "
                       f"start + context to choose one")
    return hits[0], hits[0] + len(needle)


def span_positions(tokenizer, ids: Sequence[int], evidence: TextEvidence) -> list[int]:
    """Positions in `ids` of the tokens covering the needle (every token whose chars overlap it)."""
    text, offsets = token_offsets(tokenizer, ids)
    begin, end = needle_chars(text, evidence)
    positions = [i for i, (a, b) in enumerate(offsets) if a < end and b > begin]
    if not positions:
        raise VRHError(f"no token covers the needle {evidence.text!r}")
    return positions


@dataclass(frozen=True)
class TextTarget:
    """A doc whose evidence is a span of its prompt text; `image_size` when the doc also shows an image."""

    evidence: TextEvidence
    expression: str  # the question's words: the `in` query rows
    image_id: str
    image_size: tuple[int, int] | None


def text_target(doc: Mapping[str, Any], where: str) -> TextTarget:
    evidence = text_evidence(doc, where)
    return TextTarget(evidence, evidence.query, doc_image_id(doc), _image_size(dict(doc)))


def with_query_replaced(evidence: TextEvidence, replacement: str) -> TextEvidence:
    """The evidence as the null-question prompt spells it, whose query words were replaced by `replacement` (however
    the tokenizer spells that: a word-level vocabulary may not know it): the context narrows to its side of the query
    that holds the needle, the offset moving with it. A needle overlapping the query is refused: replacing the query
    would change the evidence itself."""
    if evidence.start is None or evidence.context is None:
        return evidence
    ctx, query = evidence.context, evidence.query
    at = ctx.find(query) if query else -1
    if at < 0 or ctx.find(query, at + 1) >= 0:
        raise VRHError(f"the null question needs the query {query!r} once in the evidence context")
    end = evidence.start + len(evidence.text)
    if end <= at:
        return TextEvidence(evidence.text, evidence.start, ctx[:at], query)
    if evidence.start >= at + len(query):
        return TextEvidence(evidence.text, evidence.start - at - len(query), ctx[at + len(query):], query)
    raise VRHError(f"the needle {evidence.text!r} overlaps the query {query!r}; no null question can keep it")


def text_keys(target: TextTarget, ctx):
    """The needle's prompt tokens; the media key set is the doc's image tokens when it shows one."""

    evidence = target.evidence if ctx.query_replaced_by is None else \
        with_query_replaced(target.evidence, ctx.query_replaced_by)
    mask = torch.zeros(ctx.seq_len, dtype=torch.bool)
    mask[span_positions(ctx.tokenizer, ctx.prompt_ids.tolist(), evidence)] = True
    if target.image_size is None:
        return EvidenceKeys(mask, torch.zeros(ctx.seq_len, dtype=torch.bool))
    tmap = image_token_map(ctx.family, ctx.prompt_ids, target.image_size, dict(ctx.extras or {}))
    return EvidenceKeys(mask, tmap.key_mask(ctx.seq_len))


def _register() -> None:
    register_evidence(EvidenceKind(KIND_TEXT, text_target, text_keys, grid=False,
                                   doc="a span of the prompt text (the needle), by tokenizer offsets"))


_register()
