"""The real haystack tasks inside lmms-eval: indexed from our tasks folder, their docs built by process_docs from the
fixture snapshots (tests/fixtures/mm_niah, tests/fixtures/visual_haystacks), images handed over in prompt order,
and scored through the task's own process_results."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from vrh_lmms.base.paths import tasks_path

FIXTURES = Path(__file__).parents[1] / "fixtures"
TASKS = ["vrh_mmniah_retrieval_text", "vrh_mmniah_retrieval_image", "vrh_visual_haystacks_single"]


@pytest.fixture(scope="module")
def manager():
    from lmms_eval.tasks import TaskManager

    return TaskManager(include_path=str(tasks_path()), include_defaults=False, model_name="qwen2_5_vl")


def _colour(image) -> tuple:
    im = image if isinstance(image, Image.Image) else Image.open(image).convert("RGB")
    return im.getpixel((im.size[0] // 2, im.size[1] // 2))


def test_tasks_are_indexed_and_wired(manager):
    assert set(TASKS) <= set(manager.all_tasks)
    for task in TASKS:
        cfg = manager._get_config(task)
        assert str(manager.task_index[task]["yaml_path"]).startswith(str(tasks_path()))
        assert cfg["process_docs"].__name__ == task
        assert cfg["doc_to_visual"].__name__ == "doc_to_visual" and cfg["doc_to_text"].__name__ == "doc_to_text"
        gen = cfg["generation_kwargs"]
        assert gen["temperature"] == 0 and gen["do_sample"] is False and gen["max_new_tokens"] <= 32


def test_tasks_load_docs_with_images_in_order(manager, vrh_env):
    from lmms_eval.tasks import get_task_dict

    vrh_env.setenv("VRH_MMNIAH_DIR", str(FIXTURES / "mm_niah"))
    vrh_env.setenv("VRH_VHS_DIR", str(FIXTURES / "visual_haystacks" / "VHs_qa"))
    vrh_env.setenv("VRH_VHS_IMAGES", str(FIXTURES / "visual_haystacks" / "coco"))
    vrh_env.setenv("VRH_VHS_SIZE", "3")
    tasks = get_task_dict(TASKS, manager)
    text, image, vhs = (tasks[t] for t in TASKS)

    doc = text.test_docs()[0]
    prompt = text.doc_to_text(doc)
    assert prompt.count("<image 1>") == 1 and prompt.index("<image 1>") < prompt.index("<image 2>")
    assert doc["vrh_evidence"]["text"] in prompt
    shown = text.doc_to_visual(doc)
    assert [_colour(im) for im in shown] == [_colour(p) for p in doc["vrh_images"]] and len(shown) == 2
    assert text.process_results(doc, ["Seven."])["acc"] == 1.0

    doc = image.test_docs()[0]
    shown = image.doc_to_visual(doc)
    assert len(shown) == 7 and _colour(shown[doc["vrh_evidence"]["index"]]) == _colour(doc["vrh_images"][1])
    assert image.doc_to_text(doc).endswith("Answer with the option's letter from the given choices directly.")
    assert image.process_results(doc, ["C"])["acc"] == 1.0

    docs = vhs.test_docs()
    assert len(docs) == 3
    for doc in docs:
        shown = vhs.doc_to_visual(doc)
        at = doc["vrh_evidence"]["index"]
        assert [_colour(im) for im in shown] == [_colour(p) for p in doc["vrh_images"]]
        assert doc["vrh_images"][at].endswith(("000000000139.jpg", "000000000724.jpg", "000000000632.jpg"))
        assert vhs.doc_to_text(doc).startswith("You are given a set of images.")
    assert vhs.process_results(docs[0], ["Yes"])["acc"] == 1.0


def test_mmniah_needle_span_in_the_fed_ids(tiny_checkpoints, vrh_env):
    """The retrieval-text needle maps to tokens of the sequence the qwen2_5_vl backend feeds (system prompt, the
    doc's images first, then its text), through the text-span kind: found once, decoding back to the needle."""
    from transformers import AutoProcessor

    from vrh_lmms.runs.discovery.text_span import span_positions, text_evidence
    from vrh_lmms.tasks.common import haystack_media as H
    from vrh_lmms.tasks.common import mm_niah as M

    vrh_env.setenv("VRH_MMNIAH_DIR", str(FIXTURES / "mm_niah"))
    processor = AutoProcessor.from_pretrained(str(tiny_checkpoints("qwen2_5_vl")))
    docs = [d for d in M.vrh_mmniah_retrieval_text(None) if d["vrh_evidence"] is not None]
    assert len(docs) == 2
    for doc in docs:
        images = H.doc_to_visual(doc)
        msgs = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": [{"type": "image", "image": im} for im in images]
                 + [{"type": "text", "text": H.doc_to_text(doc)}]}]
        text = processor.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        ids = processor(text=[text], images=images, return_tensors="pt")["input_ids"][0].tolist()
        pos = span_positions(processor.tokenizer, ids, text_evidence(doc))
        assert pos == list(range(pos[0], pos[-1] + 1))
        assert processor.tokenizer.decode([ids[p] for p in pos]).strip() == doc["vrh_evidence"]["text"]
        image_pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
        assert max(i for i, t in enumerate(ids) if t == image_pad) < pos[0]  # the images come before the text
