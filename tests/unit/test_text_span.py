"""Text-span evidence on the real tokenizers (chat template included) of every family's tiny checkpoint: the
positions found decode back to the needle, and an absent or ambiguous needle is refused in one line."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model.tiny.registry import TINY_FACTORIES
from vrh_lmms.runs.discovery.evidence import evidence_kind
from vrh_lmms.runs.discovery.text_span import TextEvidence, span_positions, text_evidence

NEEDLE = "the red circle is seven"
QUESTION = f"a blue square is two . {NEEDLE} . a green cross is four . what is the red circle ?"


def fed_ids(tokenizer, question: str) -> list[int]:
    """The ids a backend feeds: the family's own chat template with its generation prompt (content parts for the
    templates that read only those; the bare prompt for a family without a template, as PaliGemma's backend)."""
    if tokenizer.chat_template is None:
        return tokenizer(question)["input_ids"]
    msgs = [{"role": "user", "content": [{"type": "text", "text": question}]}]
    text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.fixture(scope="module", params=sorted(TINY_FACTORIES))
def tokenizer(request, tiny_checkpoints):
    return AutoTokenizer.from_pretrained(str(tiny_checkpoints(request.param)))


def test_positions_decode_back_to_the_needle(tokenizer):
    ids = fed_ids(tokenizer, QUESTION)
    pos = span_positions(tokenizer, ids, TextEvidence(NEEDLE))
    assert pos == list(range(pos[0], pos[-1] + 1)) and len(pos) == len(NEEDLE.split())
    assert tokenizer.decode([ids[p] for p in pos]).strip() == NEEDLE
    # the chat template's head comes first: the span sits after the system/user tokens
    assert pos[0] > 0 and ids[pos[0] - 1] != ids[pos[0]]


def test_absent_and_ambiguous_needles_are_refused(tokenizer):
    ids = fed_ids(tokenizer, QUESTION)
    with pytest.raises(VRHError, match="does not contain the needle 'the yellow ring'"):
        span_positions(tokenizer, ids, TextEvidence("the yellow ring"))
    with pytest.raises(VRHError, match="occurs 2 times"):
        span_positions(tokenizer, ids, TextEvidence("the red circle"))
    # start + context choose the occurrence: the question's last "red circle"
    at = QUESTION.rindex("red circle")
    pos = span_positions(tokenizer, ids, TextEvidence("red circle", start=at, context=QUESTION))
    assert tokenizer.decode([ids[p] for p in pos]).strip() == "red circle"
    assert pos[0] > span_positions(tokenizer, ids, TextEvidence(NEEDLE))[-1]


def test_doc_fields():
    doc = {"vrh_evidence": {"kind": "text", "text": NEEDLE, "query": "what is the red circle ?"}}
    assert evidence_kind(doc) == "text" and evidence_kind({"vrh_gt_box": [0, 0, 1, 1]}) == "box"
    assert text_evidence(doc).query == "what is the red circle ?"
    with pytest.raises(VRHError, match="kind 'smell' is not supported"):
        evidence_kind({"vrh_evidence": {"kind": "smell"}})
    with pytest.raises(VRHError, match="needs a non-empty `text`"):
        text_evidence({"vrh_evidence": {"kind": "text"}})
