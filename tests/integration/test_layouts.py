"""Image-token layouts, checked by experiment on every family's tiny model, plus the box -> token rules."""

from __future__ import annotations

import pytest
import torch

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model.capture.layouts import ImageTokenMap, box_key_mask, box_token_indices, image_token_map
from vrh_lmms.model.capture.verify import check_layout
from vrh_lmms.model.tiny.inputs import load_tiny, render_prompt, scene_messages
from vrh_lmms.model.tiny.registry import TINY_FACTORIES as TINY

# float-exact outcomes: CI runs these once more under ATEN_CPU_CAPABILITY=default (docs/contracts.md)
pytestmark = pytest.mark.exact

torch.set_num_threads(1)

LAYOUT_FAMILIES = ["qwen2_5_vl", "qwen3_vl", "glm4v", "internvl", "llava_next", "paligemma", "idefics3",
                   "qwen2_5_omni"]
# Non-square sizes exercise the aspect-ratio logic (InternVL: 6 and 4 tiles + thumbnail; LLaVA-NeXT: unpadding).
SIZES = [(150, 90), (97, 131), (300, 50)]
RECTS = [(0.2, 0.3, 0.55, 0.7), (0.6, 0.05, 0.95, 0.4)]


def chat_batch(processor, image):
    """One sample through the checkpoint's own prompt format and processor."""
    prompt = render_prompt(processor, scene_messages("the red square", image))
    return processor(text=[prompt], images=[image], return_tensors="pt")


@pytest.fixture(scope="module", params=LAYOUT_FAMILIES)
def family_model(request, tiny_checkpoints):
    if request.param not in TINY:
        pytest.skip(f"no tiny {request.param} checkpoint in vrh_lmms.model.tiny.registry yet")
    model, processor = load_tiny(tiny_checkpoints(request.param))
    return request.param, model, processor


@pytest.mark.parametrize("size", SIZES)
def test_layout_by_perturbation(family_model, size):
    """A rectangle drawn on a flat image changes exactly the predicted tokens' inputs to text layer 0."""
    family, model, processor = family_model
    for frac in RECTS:
        check = check_layout(model, processor, family, size, chat_batch, frac=frac)
        assert check.hooked > 0
        assert check.clearance >= 3.0, f"rectangle edges only {check.clearance:.1f} px from a cell border"
        assert 0 < len(check.changed) < check.image_tokens, "the perturbation must be local to be informative"
        assert check.changed == check.predicted, (
            f"{family} {size} rect {check.rect}: changed-only {sorted(check.changed - check.predicted)}, "
            f"predicted-only {sorted(check.predicted - check.changed)}")


def synthetic_map() -> ImageTokenMap:
    """Two views of a 40 x 20 image: a 4 x 2 grid of 10 px cells ("tile") and one 40 x 20 cell ("thumbnail")."""
    cells = [(x, y, x + 10, y + 10) for y in (0, 10) for x in (0, 10, 20, 30)] + [(0, 0, 40, 20)]
    return ImageTokenMap(positions=torch.arange(5, 14), cells=torch.tensor(cells, dtype=torch.float32),
                         view=["tile"] * 8 + ["thumbnail"], no_cell=torch.tensor([4, 14]), image_size=(40, 20))


def test_overlap_rule_half_cell_and_centre_fallback():
    tmap = synthetic_map()
    # Covers cell 1 fully and half of cell 2: both tiles count; the thumbnail (15 % covered) falls back to its centre.
    assert box_token_indices(tmap, [10, 0, 25, 10]).tolist() == [1, 2, 8]
    # A tiny box covers no half cell anywhere: the cell holding its centre, per view.
    assert box_token_indices(tmap, [31, 12, 32, 13]).tolist() == [7, 8]
    # Box centre on a shared border: the half-open rule picks the right / lower cell.
    assert box_token_indices(tmap, [9, 9, 11, 11]).tolist() == [5, 8]
    # Whole image: every cell of both views.
    assert box_token_indices(tmap, [0, 0, 40, 20]).tolist() == list(range(9))
    # Right / bottom image edge belongs to the last cell.
    assert box_token_indices(tmap, [40, 20, 40, 20]).tolist() == [7, 8]


def test_any_and_center_rules_and_mask():
    tmap = synthetic_map()
    assert box_token_indices(tmap, [9, 0, 11, 5], rule="any").tolist() == [0, 1, 8]
    assert box_token_indices(tmap, [10, 10, 10, 20], rule="any").tolist() == []  # zero-area touch
    assert box_token_indices(tmap, [0, 0, 20, 20], rule="center").tolist() == [0, 1, 4, 5, 8]
    mask = box_key_mask(tmap, [0, 0, 10, 10], seq_len=16)
    assert mask.nonzero().flatten().tolist() == [5, 13]
    assert tmap.key_mask(16).nonzero().flatten().tolist() == list(range(4, 15))
    with pytest.raises(VRHError, match="rule"):
        box_token_indices(tmap, [0, 0, 1, 1], rule="iou")
    with pytest.raises(VRHError, match="x1 <= x2"):
        box_token_indices(tmap, [5, 0, 1, 1])


def test_count_mismatch_is_refused():
    ids = torch.tensor([1, 7, 7, 7, 2])
    with pytest.raises(VRHError, match="predicts 4 image tokens but the input has 3"):
        image_token_map("qwen2_5_vl", ids, (56, 56),
                        {"image_token_id": 7, "image_grid_thw": [1, 4, 4], "patch_size": 14, "merge_size": 2})
    with pytest.raises(VRHError, match="no image-token layout"):
        image_token_map("nonexistent", ids, (56, 56), {"image_token_id": 7})
