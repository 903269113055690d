"""`vrh_qwen25 ... image_position=after_prompt`: the request comes before the image (models trained that way)."""

from __future__ import annotations

import pytest
import torch
from support.wrappers import recorded_generate, run, scene_docs
from vrh_lmms.model_wrappers.qwen2_5_vl import VRHQwen25, VRHQwen25Chat, with_image_after_prompt

from vrh_lmms.errors import VRHError

torch.set_num_threads(1)
PIXELS = {"min_pixels": 28 * 28 * 4, "max_pixels": 28 * 28 * 16}


def _first(ids: list[int], token: int) -> int:
    assert token in ids
    return ids.index(token)


def _prompt_ids(ckpt, cls=VRHQwen25, **kwargs) -> tuple[list[int], int, int]:
    """Prompt token ids, the id of a word of the request (the expression's shape) and the image token id."""
    wrapper = cls(pretrained=str(ckpt), **PIXELS, **kwargs)
    docs = scene_docs(1)
    with recorded_generate(wrapper.model) as calls:
        run(wrapper, docs, max_new_tokens=1)
    tok = wrapper.processor.tokenizer
    word = tok.convert_tokens_to_ids(docs[0]["expression"].split()[-1])
    assert word != tok.unk_token_id
    return calls[0]["input_ids"][0].tolist(), word, wrapper.model.config.image_token_id


@pytest.mark.parametrize("cls", [VRHQwen25, VRHQwen25Chat], ids=["simple", "chat"])
def test_image_position_orders_image_and_request(tiny_qwen25, cls):
    ids, word, image = _prompt_ids(tiny_qwen25, cls)
    assert _first(ids, image) < _first(ids, word)  # the backend's default: image first
    after, word, image = _prompt_ids(tiny_qwen25, cls, image_position="after_prompt")
    assert _first(after, word) < _first(after, image)
    assert sorted(after) == sorted(ids)  # the same tokens, only reordered (no placeholder text left behind)


def test_placeholder_is_added_once():
    assert with_image_after_prompt("Locate it.") == "Locate it. <image 1>"
    assert with_image_after_prompt("<image 1> Locate it.") == "<image 1> Locate it."


def test_unknown_image_position_is_refused(tiny_qwen25):
    with pytest.raises(VRHError, match="image_position='middle'"):
        VRHQwen25Chat(pretrained=str(tiny_qwen25), image_position="middle", **PIXELS)
