"""`vrh_qwen25 ... image_position=after_prompt`: the request comes before the image (models trained that way)."""

from __future__ import annotations

import pytest
import torch
from support.wrappers import SPLIT, TASK, recorded_generate, requests, run, scene_docs

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model_wrappers.qwen2_5_vl import VRHQwen25, VRHQwen25Chat, with_image_after_prompt

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
    assert with_image_after_prompt("Locate it.", 3) == "Locate it. <image 1> <image 2> <image 3>"


@pytest.mark.parametrize("position", ["before_prompt", "after_prompt"])
@pytest.mark.parametrize("cls", [VRHQwen25, VRHQwen25Chat], ids=["simple", "chat"])
def test_every_image_of_a_doc_reaches_generate_in_order(tiny_qwen25, cls, position):
    """A doc of three images of different sizes: generate gets three image spans, grids in the doc's order."""
    from PIL import Image

    wrapper = cls(pretrained=str(tiny_qwen25), image_position=position, **PIXELS)
    images = [Image.new("RGB", s, (90, 90, 90)) for s in [(56, 56), (112, 56), (56, 112)]]
    docs = {0: {"image": images[0], "images": images, "expression": "the red circle"}}
    if wrapper.is_simple:
        reqs = requests(docs, chat=False, max_new_tokens=1)
        reqs[0] = reqs[0].__class__(request_type="generate_until", idx=0, metadata=reqs[0].metadata,
                                    arguments=(reqs[0].args[0], reqs[0].args[1], lambda d: d["images"],
                                               *reqs[0].args[3:]))
    else:
        def to_messages(d):
            return [{"role": "user", "content": [*({"type": "image", "url": im} for im in d["images"]),
                                                 {"type": "text", "text": "Locate the red circle."}]}]

        reqs = requests(docs, chat=True, max_new_tokens=1)
        reqs[0] = reqs[0].__class__(request_type="generate_until", idx=0, metadata=reqs[0].metadata,
                                    arguments=(reqs[0].args[0], to_messages, *reqs[0].args[2:]))
    wrapper.task_dict = {TASK: {SPLIT: docs}}
    with recorded_generate(wrapper.model) as calls:
        wrapper.generate_until(reqs)
    grids = calls[0]["image_grid_thw"].tolist()
    assert grids == [[1, 4, 4], [1, 4, 8], [1, 8, 4]]
    ids = calls[0]["input_ids"][0]
    assert int((ids == wrapper.model.config.vision_start_token_id).sum()) == 3


def test_unknown_image_position_is_refused(tiny_qwen25):
    with pytest.raises(VRHError, match="image_position='middle'"):
        VRHQwen25Chat(pretrained=str(tiny_qwen25), image_position="middle", **PIXELS)
