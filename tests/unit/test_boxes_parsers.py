"""Parser corpus per family: well-formed, messy and malformed replies, read back to original-image pixels."""

from __future__ import annotations

import pytest

from vrh_lmms.base.boxes import CONVENTIONS, get_convention
from vrh_lmms.base.boxes.resize import qwen2_5_vl_model_size

W, H = 640, 480  # original image
RW, RH = qwen2_5_vl_model_size(W, H)  # what Qwen2.5-VL sees with lmms-eval's defaults: 644 x 476


def px(conv: str, text: str, size=(W, H), **params):
    return get_convention(conv).read_box(text, size, **params)


def approx(box, expected, tol=1e-6):
    assert box is not None, "expected a box"
    assert box == pytest.approx(expected, abs=tol)


# ------------------------------------------------------------------------------------------ qwen2.5-vl
QWEN25_OK = [
    '[{"bbox_2d": [64, 48, 322, 238], "label": "the red car"}]',
    '```json\n[\n  {"bbox_2d": [64, 48, 322, 238], "label": "car"}\n]\n```',
    '{"bbox_2d": [64, 48, 322, 238]}',
    '{"bbox": [64, 48, 322, 238]}',
    "[{'bbox_2d': [64, 48, 322, 238], 'label': 'car'},]",  # python quotes, trailing comma
    '[ { " bbox_2d " : [ 64 , 48 , 322 , 238 ] , " label " : " car " } ]',  # word-level tokenizer decode
    '[ 64 , 48 , 322 , 238 ]',
    'The car is at [64, 48, 322, 238].',
    '<|box_start|>(64,48),(322,238)<|box_end|>',
    '[{"bbox_2d": [[64, 48], [322, 238]]}]',
    '{"x1": 64, "y1": 48, "x2": 322, "y2": 238}',
    'bbox: 64, 48, 322, 238',
    '[{"bbox_2d": [322, 238, 64, 48]}]',  # swapped corners
]


@pytest.mark.parametrize("text", QWEN25_OK)
def test_qwen25_well_formed_and_messy(text):
    r = px("qwen2_5_vl", text)
    sx, sy = W / RW, H / RH
    approx(r.box, [64 * sx, 48 * sy, 322 * sx, 238 * sy])
    assert r.n_boxes == 1


def test_qwen25_several_boxes_takes_first_and_counts():
    r = px("qwen2_5_vl", '[{"bbox_2d": [10, 10, 20, 20]}, {"bbox_2d": [30, 30, 40, 40]}, {"bbox_2d": [1,1,2,2]}]')
    assert r.raw == [10, 10, 20, 20] and r.n_boxes == 3


def test_qwen25_json_wins_over_prose_numbers():
    r = px("qwen2_5_vl", 'Found 2 objects in 3 steps: [{"bbox_2d": [10, 10, 20, 20]}]')
    assert r.raw == [10, 10, 20, 20]


def test_out_of_range_values_are_clipped():
    r = px("qwen2_5_vl", '[{"bbox_2d": [-20, -5, 9000, 700]}]')
    assert r.box == [0.0, 0.0, float(W), float(H)]


@pytest.mark.parametrize("text", ["", "I cannot see that.", "[64, 48, 322]", '{"bbox_2d": "left"}', "[[[", None,
                                  '{"bbox_2d": [true, false, 1, 2]}', "label 305 bbox 535 bbox 535"])
@pytest.mark.parametrize("conv", sorted(CONVENTIONS))
def test_malformed_is_a_parse_failure_never_an_exception(conv, text):
    r = px(conv, text)
    assert r.box is None and r.n_boxes == 0 and not r.ok


def test_reasoning_drafts_are_ignored():
    r = px("qwen3_vl", "<think>maybe [0, 0, 10, 10]?</think> [100, 100, 500, 500]")
    approx(r.box, [64, 48, 320, 240])


# ------------------------------------------------------------------------------------------ 0-1000 families
@pytest.mark.parametrize("conv,text", [
    ("qwen3_vl", '[{"bbox_2d": [100, 100, 500, 500], "label": "car"}]'),
    ("qwen3_vl", "```json\n[{\"bbox_2d\": [100,100,500,500]}]\n```"),
    ("glm4v", "<|begin_of_box|>[100, 100, 500, 500]<|end_of_box|>"),
    ("glm4v", "<|begin_of_box|>[[100,100,500,500]]<|end_of_box|>"),
    ("glm4v", ("<think>The car [1, 2, 3, 4] is left.</think><answer><|begin_of_box|>[100, 100, 500, 500]"
               "<|end_of_box|></answer>")),
    ("internvl", "<ref>the car</ref><box>[[100, 100, 500, 500]]</box>"),
    ("internvl", "the car<box>[[100,100,500,500]]</box>"),
    ("internvl", "<box> [ [ 100 , 100 , 500 , 500 ] ] </box>"),
    ("internvl", "[[100, 100, 500, 500]]"),
    ("generic", "[100, 100, 500, 500]"),
    ("generic", "[0.1, 0.1, 0.5, 0.5]"),
])
def test_thousand_grid_families(conv, text):
    approx(px(conv, text).box, [64, 48, 320, 240])


def test_internvl_counts_boxes_in_one_tag():
    r = px("internvl", "<ref>cars</ref><box>[[100, 100, 500, 500], [600, 600, 700, 700]]</box>")
    assert r.n_boxes == 2 and r.raw == [100, 100, 500, 500]


# ------------------------------------------------------------------------------------------ DeepSeek-VL2 (0-999)
@pytest.mark.parametrize("text", [
    "<|ref|>the car<|/ref|><|det|>[[111, 222, 333, 444]]<|/det|>",
    "<|det|>[[111,222,333,444]]<|/det|>",
    "<|ref|> the car <|/ref|> <|det|> [ [ 111 , 222 , 333 , 444 ] ] <|/det|>",
])
def test_deepseek_vl2(text):
    approx(px("deepseek_vl2", text).box, [111 / 999 * W, 222 / 999 * H, 333 / 999 * W, 444 / 999 * H])


# ------------------------------------------------------------------------------------------ LLaVA-NeXT / Magma / Phi-4
@pytest.mark.parametrize("conv,text", [
    ("llava_next", "[0.1, 0.1, 0.5, 0.5]"),
    ("llava_next", "The region is [0.10, 0.10, 0.50, 0.50]."),
    ("llava_next", "[ 0.1 , 0.1 , 0.5 , 0.5 ]"),
    ("magma", "(0.10,0.10,0.50,0.50)"),
    ("magma", "<box>(100,100),(500,500)</box>"),
    ("phi4_multimodal", "[0.1, 0.1, 0.5, 0.5]"),
    ("phi4_multimodal", "```\n[100, 100, 500, 500]\n```"),
])
def test_fraction_families(conv, text):
    approx(px(conv, text).box, [64, 48, 320, 240])


def test_llava_padded_square():
    # LLaVA-1.5 pads 640x480 to a centred 640x640 square: y fractions are of 640, shifted up by 80.
    r = px("llava_next", "[0.1, 0.25, 0.5, 0.75]", pad_to_square=True)
    approx(r.box, [64, 0.25 * 640 - 80, 320, 0.75 * 640 - 80])


# ------------------------------------------------------------------------------------------ PaliGemma
@pytest.mark.parametrize("text", [
    "<loc0256><loc0128><loc0768><loc0512> car",
    "<loc0256> <loc0128> <loc0768> <loc0512> car ; <loc0000><loc0000><loc0010><loc0010> car",
])
def test_paligemma_y_first_bins_over_1023(text):
    r = px("paligemma", text)
    approx(r.box, [128 / 1023 * W, 256 / 1023 * H, 512 / 1023 * W, 768 / 1023 * H])


def test_paligemma_last_bin_is_the_image_edge():
    """big_vision's PaliGemma evaluator (evaluators/proj/paligemma/transfers/segmentation.py) decodes
    `tokens[:, :4] / 1023`: bins 0 and 1023 are the image's edges, so a whole-image box reads as the whole image."""
    approx(px("paligemma", "<loc0000><loc0000><loc1023><loc1023> everything").box, [0, 0, W, H])


def test_paligemma_ignores_non_loc_numbers():
    assert px("paligemma", "[100, 100, 500, 500]").box is None


def test_prompts():
    assert get_convention("qwen2_5_vl").prompt("the red circle") == (
        "Locate the red circle in the image and output its bbox coordinates in JSON format.")
    assert get_convention("paligemma").prompt("cat") == "detect cat"
    assert get_convention("internvl").prompt("cat").endswith("<ref>cat</ref>")
    assert get_convention("deepseek_vl2").prompt("cat") == "<|ref|>cat<|/ref|>."
    for conv in CONVENTIONS.values():
        assert "the dog" in conv.prompt("the dog") and "the dog" in conv.pointing_prompt("the dog")
        assert conv.source, f"{conv.name} documents no source"


# ------------------------------------------------------------------------------------------ points
@pytest.mark.parametrize("conv,text,expected", [
    ("qwen2_5_vl", '[{"point_2d": [322, 238], "label": "spot"}]', [322 * W / RW, 238 * H / RH]),
    ("qwen3_vl", '{"point_2d": [500, 500]}', [320, 240]),
    ("generic", "[(0.5, 0.5)]", [320, 240]),
    ("internvl", "<box>[[400, 400, 600, 600]]</box>", [320, 240]),  # no point format: box centre
    ("paligemma", "<loc0256><loc0128><loc0768><loc0512> x", [320 / 1023 * W, 512 / 1023 * H]),
])
def test_points(conv, text, expected):
    r = get_convention(conv).read_points(text, (W, H))
    assert r.ok and r.points[0] == pytest.approx(expected)


def test_points_malformed():
    assert not get_convention("qwen2_5_vl").read_points("nowhere", (W, H)).ok
