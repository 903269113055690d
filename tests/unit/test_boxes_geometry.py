"""IoU and box helpers, checked against torchvision.ops.box_iou."""

from __future__ import annotations

import random

import pytest

from vrh_lmms.base.boxes.geometry import area, clip_box, iou, order_corners, xywh_to_xyxy


def test_iou_matches_torchvision_on_random_boxes():
    torch = pytest.importorskip("torch")
    from torchvision.ops import box_iou

    rng = random.Random(0)
    boxes = []
    for _ in range(200):
        x1, y1 = rng.uniform(0, 500), rng.uniform(0, 500)
        boxes.append([x1, y1, x1 + rng.uniform(0, 200), y1 + rng.uniform(0, 200)])
    boxes += [[10, 10, 10, 50], [0, 0, 0, 0], [5, 5, 100, 100], [5, 5, 100, 100]]  # degenerate + identical
    ref = box_iou(torch.tensor(boxes, dtype=torch.float64), torch.tensor(boxes, dtype=torch.float64))
    ref = torch.nan_to_num(ref, nan=0.0)
    for i in range(0, len(boxes), 7):
        for j in range(len(boxes)):
            assert iou(boxes[i], boxes[j]) == pytest.approx(float(ref[i, j]), abs=1e-9)


def test_iou_known_values():
    assert iou([0, 0, 10, 10], [0, 0, 10, 10]) == 1.0
    assert iou([0, 0, 10, 10], [10, 10, 20, 20]) == 0.0
    assert iou([0, 0, 10, 10], [5, 0, 15, 10]) == pytest.approx(50 / 150)


def test_helpers():
    assert xywh_to_xyxy([1, 2, 3, 4]) == [1, 2, 4, 6]
    assert order_corners([10, 20, 0, 5]) == [0, 5, 10, 20]
    assert clip_box([-5, 3, 700, 900], 640, 480) == [0, 3, 640, 480]
    assert area([0, 0, 2, 3]) == 6 and area([5, 5, 1, 1]) == 0
