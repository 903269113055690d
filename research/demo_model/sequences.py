"""Token sequences for training: chat-formatted text-only and image turns (image first, or after the prompt) with
their answer tokens.

Every turn is rendered by the checkpoint's own chat template (system prompt, user turn, generation prompt), the
image placeholder expanded to the image's token count as the processor does, so a grounding turn is token for
token what lmms-eval's `qwen2_5_vl` backend feeds the model (checked in tests against `backend_inputs`).
Batches are right-padded: with causal attention no real token attends to a pad, so no padding mask is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from vrh_lmms.base.synth.demo_spec import SYSTEM_PROMPT

_MARK = "MARKERTEXT"


@dataclass
class Encoded:
    ids: list[int]
    answer_start: int  # index of the first answer token
    has_image: bool
    extra_loss: tuple[int, ...] = ()  # prompt token positions that are predicted too (multi-query practice)


class TurnEncoder:
    """Builds the ids of `<system> <user> [image] prompt <assistant> answer <|im_end|>` from template pieces
    (`<user> prompt [image]` with `prompt_first`, as `vrh_qwen25 ...,image_position=after_prompt` feeds it)."""

    def __init__(self, tokenizer, image_tokens: int, prompt_first: bool = False):
        self.tokenizer = tokenizer
        self.image_tokens = image_tokens
        self.prompt_first = prompt_first
        self.pad_id = tokenizer.pad_token_id
        self.eos_id = tokenizer.eos_token_id
        self.image_id = tokenizer.convert_tokens_to_ids("<|image_pad|>")
        self.vocab = tokenizer.get_vocab()
        self._pieces = {has: self._split(has) for has in (False, True)}

    def _split(self, has_image: bool) -> tuple[list[int], list[int]]:
        content = [{"type": "text", "text": _MARK}]
        if has_image:
            picture = {"type": "image", "image": "x"}
            content = [*content, picture] if self.prompt_first else [picture, *content]
        msgs = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": content}]
        text = self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        head, tail = text.split(_MARK)
        pieces = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in (head, tail)]
        if has_image:
            part = pieces[1 if self.prompt_first else 0]
            at = part.index(self.image_id)
            part[at:at + 1] = [self.image_id] * self.image_tokens
        return pieces[0], pieces[1]

    def words(self, words: Sequence[str]) -> list[int]:
        try:
            return [self.vocab[w] for w in words]
        except KeyError as e:
            raise ValueError(f"word {e.args[0]!r} is not in the demo tokenizer's vocabulary") from None

    def encode(self, prompt: Sequence[str] | str, answer: Sequence[str], has_image: bool,
               prompt_loss: Sequence[int] = ()) -> Encoded:
        """`prompt_loss`: word indices of a word-list prompt whose tokens are predicted as well."""
        head, tail = self._pieces[has_image]
        body = self.tokenizer(prompt, add_special_tokens=False)["input_ids"] if isinstance(prompt, str) \
            else self.words(prompt)
        ids = head + body + tail
        extra = tuple(len(head) + i for i in prompt_loss)
        return Encoded(ids + self.words(answer) + [self.eos_id], len(ids), has_image, extra)

    def prompt_offset(self, has_image: bool) -> int:
        """Position of the user prompt's first word (the word-index -> token-position offset)."""
        return len(self._pieces[has_image][0])


def collate(seqs: Sequence[Encoded], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ids, and for the loss: (row, position) of every predicted token (answer, then any practice
    tokens of the prompt) and the position predicting it."""
    width = max(len(s.ids) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    rows, pos = [], []
    for r, s in enumerate(seqs):
        ids[r, : len(s.ids)] = torch.tensor(s.ids)
        for p in (*s.extra_loss, *range(s.answer_start, len(s.ids))):
            rows.append(r)
            pos.append(p)
    rows_t, pos_t = torch.tensor(rows), torch.tensor(pos)
    return {"input_ids": ids, "loss_rows": rows_t, "loss_pos": pos_t - 1, "targets": ids[rows_t, pos_t]}
