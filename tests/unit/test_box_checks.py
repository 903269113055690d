"""A doc's ground-truth box is checked where discovery (and steering, patching, attention maps) first reads it: short,
non-numeric, NaN or infinite, zero or negative area, outside the image: one line naming the task, doc id and field,
instead of a traceback or a box that silently maps to corner tokens."""

from __future__ import annotations

import pytest

from vrh_lmms.base.boxes.geometry import checked_box
from vrh_lmms.base.errors import VRHError
from vrh_lmms.runs.discovery.targets import target_from_doc

WHERE = "vrh_refcoco_val doc 17"


def doc(**fields):
    return {"vrh_image_size": [640, 480], "vrh_expression": "the dog", "vrh_image_id": "9", **fields}


@pytest.mark.parametrize("box, match", [
    ([10, 20, 30], r"field 'vrh_gt_box' has 3 numbers \(\[10, 20, 30\]\), needs 4"),
    ([10, 20, 30, 40, 50], r"has 5 numbers"),
    ([10, float("nan"), 30, 40], r"every coordinate must be finite"),
    ([10, 20, float("inf"), 40], r"every coordinate must be finite"),
    ([10, "20", 30, 40], r"every coordinate must be a number"),
    ([10, 20, None, 40], r"every coordinate must be a number"),
    ("10,20,30,40", r"expected 4 numbers"),
    ([30, 20, 30, 40], r"zero or negative area"),
    ([30, 40, 10, 20], r"zero or negative area"),
    ([600, 20, 700, 40], r"outside the 640 x 480 image"),
    ([-5, 20, 30, 40], r"outside the 640 x 480 image"),
    ([10, 400, 30, 490], r"outside the 640 x 480 image"),
])
def test_bad_boxes_are_one_line_naming_the_doc_and_field(box, match):
    with pytest.raises(VRHError, match=match) as info:
        target_from_doc(doc(vrh_gt_box=box), where=WHERE)
    message = str(info.value)
    assert message.startswith(f"{WHERE}: field 'vrh_gt_box'") and "\n" not in message


def test_good_boxes_pass_unchanged():
    assert target_from_doc(doc(vrh_gt_box=[10, 20, 30, 40]), where=WHERE).box == (10.0, 20.0, 30.0, 40.0)
    # COCO float boxes overshoot their image by a fraction of a pixel: kept as they are
    assert target_from_doc(doc(vrh_gt_box=[0, 0, 640.4, 480.2]), where=WHERE).box == (0.0, 0.0, 640.4, 480.2)
    assert target_from_doc(doc(bbox=[10, 20, 5, 6]), where=WHERE).box == (10.0, 20.0, 15.0, 26.0)


def test_coco_and_toloka_fields_are_named():
    with pytest.raises(VRHError, match=r"doc 17: field 'bbox' \(x, y, w, h\) has 3 numbers"):
        target_from_doc(doc(bbox=[1, 2, 3]), where=WHERE)
    with pytest.raises(VRHError, match=r"field 'bbox' \(x, y, w, h\) is \[10.0, 20.0, 0.0, 6.0\]: zero or negative"):
        target_from_doc(doc(bbox=[10, 20, 0, 6]), where=WHERE)
    with pytest.raises(VRHError, match=r"fields left/top/right/bottom is .*outside the 640 x 480 image"):
        target_from_doc(doc(left=0, top=0, right=900, bottom=10), where=WHERE)


def test_numpy_coordinates_are_numbers():
    import numpy as np

    assert checked_box(np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32), (8, 8), "box") == [1.0, 2.0, 3.0, 4.0]
