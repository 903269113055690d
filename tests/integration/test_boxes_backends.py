"""The Qwen2.5-VL box reader assumes the image size the model really saw, on both lmms-eval paths (issue 12.6).

lmms-eval's simple backend writes its `min_pixels`/`max_pixels` into every image item, so `qwen_vl_utils.
fetch_image` resizes with them; the chat backend sends none, so fetch_image uses its own defaults. The two paths give
the model different images (300x200: 560x392 simple, 588x364 chat). Each test runs a real backend on the tiny
checkpoint through lmms-eval's evaluator on a vrh grounding task whose rows are in the lmms-lab RefCOCO schema,
records `image_grid_thw` from `model.generate`, and compares it with the size the reader assumes for that doc.
"""

from __future__ import annotations

import json

import pytest
import torch
from support.wrappers import recorded_generate

from vrh_lmms.base.boxes import context
from vrh_lmms.base.paths import tasks_path
from vrh_lmms.tasks.common import grounding as G

torch.set_num_threads(1)
TASK, SPLIT = "vrh_refcoco_testA", "testA"
SIZES = [(300, 200), (2000, 1500)]
# (width, height) seen, from lmms-eval defaults min_pixels=256*28*28, max_pixels=1605632 (issue 12, measured)
SEEN = {"simple": {(300, 200): (560, 392), (2000, 1500): (1456, 1092)},
        "chat": {(300, 200): (588, 364), (2000, 1500): (1428, 1092)}}


@pytest.fixture(scope="module")
def manager():
    from lmms_eval.tasks import TaskManager

    return TaskManager(include_path=str(tasks_path()), model_name="qwen2_5_vl")


@pytest.fixture
def refcoco_rows(tmp_path, vrh_env):
    """lmms-lab-encoder/RefCOCO schema (card): question_id, image, question, answer (all sentences), segmentation,
    bbox (COCO xywh pixels), iscrowd, file_name."""
    import datasets
    from PIL import Image

    rows = []
    for i, (w, h) in enumerate(SIZES):
        rows.append({"question_id": str(i), "image": Image.new("RGB", (w, h), (90, 90, 90)),
                     "question": "Please carefully observe the area circled in the image and come up with a "
                                 "caption for the area.", "answer": ["the left dog"],
                     "segmentation": [0.1 * w, 0.2 * h, 0.5 * w, 0.2 * h, 0.5 * w, 0.8 * h],
                     "bbox": [0.1 * w, 0.2 * h, 0.4 * w, 0.6 * h], "iscrowd": 0,
                     "file_name": f"COCO_train2014_{100 + i:012d}_{i}.jpg"})
    ds = datasets.Dataset.from_list(rows).cast_column("image", datasets.Image())
    ds.to_parquet(str(tmp_path / f"{SPLIT}.parquet"))
    vrh_env.setenv("VRH_REFCOCO_DATA", str(tmp_path))
    return tmp_path


def _backend(kind: str, path: str, ckpt):
    if kind == "lmms_eval":
        if path == "simple":
            from lmms_eval.models.simple.qwen2_5_vl import Qwen2_5_VL
        else:
            from lmms_eval.models.chat.qwen2_5_vl import Qwen2_5_VL
        return Qwen2_5_VL(pretrained=str(ckpt), device="cpu", device_map="cpu")
    from vrh_lmms.model_wrappers.qwen2_5_vl import VRHQwen25, VRHQwen25Chat

    return (VRHQwen25 if path == "simple" else VRHQwen25Chat)(pretrained=str(ckpt), dtype="float32")


@pytest.mark.parametrize("kind", ["lmms_eval", "vrh"])
@pytest.mark.parametrize("path", ["simple", "chat"])
def test_reader_assumes_the_size_the_model_saw(path, kind, tiny_qwen25, manager, refcoco_rows):
    from lmms_eval.evaluator import simple_evaluate

    lm = _backend(kind, path, tiny_qwen25)
    assert lm.is_simple == (path == "simple")
    with recorded_generate(lm.model) as calls:
        out = simple_evaluate(model=lm, tasks=[TASK], task_manager=manager, log_samples=True,
                              gen_kwargs="max_new_tokens=2")
    seen = sorted((int(c["image_grid_thw"][0][2]) * 14, int(c["image_grid_thw"][0][1]) * 14) for c in calls)
    assert seen == sorted(SEEN[path].values())
    samples = sorted(out["samples"][TASK], key=lambda s: s["doc_id"])
    assert len(samples) == len(SIZES)
    for sample, size in zip(samples, SIZES, strict=True):
        # an exact answer in the pixels the model saw scores IoU 1 (0.78-0.84 when the reader assumes another size)
        doc = lm.task_dict[TASK][SPLIT][sample["doc_id"]]
        sw, sh = SEEN[path][size]
        x1, y1, x2, y2 = doc["gt_box"]
        box = [round(x1 * sw / size[0]), round(y1 * sh / size[1]), round(x2 * sw / size[0]), round(y2 * sh / size[1])]
        scored = G.process_results(doc, [json.dumps([{"bbox_2d": box, "label": "dog"}])])
        assert scored["iou"]["score"] > 0.97, (path, kind, size, scored["iou"])
        from vrh_lmms.base.boxes.spaces import resized_size

        resolved = context.for_scoring(f"{TASK}#{sample['doc_id']}")
        assert resolved.name == "qwen2_5_vl" and sample["vrh_record"]["convention_source"] == "backend"
        assert resized_size(*size, resolved.params) == SEEN[path][size]


def test_wrapper_announces_its_path_when_no_image_was_seen(tiny_qwen25, vrh_env):
    """Before (or without) any doc, the active convention a vrh_qwen25 wrapper sets already carries its path."""
    from vrh_lmms.base.boxes.spaces import resized_size
    from vrh_lmms.model_wrappers.qwen2_5_vl import VRHQwen25, VRHQwen25Chat

    VRHQwen25(pretrained=str(tiny_qwen25), dtype="float32")
    simple = context.get_active().params
    assert (simple["fetch_min_pixels"], simple["fetch_max_pixels"]) == (simple["min_pixels"], simple["max_pixels"])
    assert resized_size(300, 200, simple) == SEEN["simple"][(300, 200)]
    VRHQwen25Chat(pretrained=str(tiny_qwen25), dtype="float32")
    chat = context.get_active().params
    assert chat["fetch_min_pixels"] is None and resized_size(300, 200, chat) == SEEN["chat"][(300, 200)]
