"""Qwen2.5-VL resize reproduction: our smart_resize copies vs the originals, and vs the real pipeline."""

from __future__ import annotations

import random

import pytest

from vrh_lmms.base.boxes import get_convention
from vrh_lmms.base.boxes.resize import (
    LMMS_EVAL_MAX_PIXELS,
    LMMS_EVAL_MIN_PIXELS,
    qwen2_5_vl_model_size,
    smart_resize_qwen_vl_utils,
    smart_resize_transformers,
)

SIZES = [(224, 224), (640, 480), (480, 640), (4000, 3000), (33, 500), (1000, 20), (27, 27), (1, 150), (3000, 15),
         (1920, 1080), (300, 301), (14, 14), (5000, 5000)]
LIMITS = [(LMMS_EVAL_MIN_PIXELS, LMMS_EVAL_MAX_PIXELS), (28 * 28 * 4, 28 * 28 * 256), (50176, 50176),
          (3136, 12845056)]


def _random_sizes(n=300, seed=0):
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        w, h = rng.randint(1, 5000), rng.randint(1, 5000)
        if max(w, h) / min(w, h) < 200:
            out.append((w, h))
    return out


def test_matches_qwen_vl_utils_smart_resize():
    from qwen_vl_utils.vision_process import smart_resize

    for w, h in SIZES + _random_sizes():
        for lo, hi in LIMITS + [(None, None)]:
            assert smart_resize_qwen_vl_utils(h, w, 28, lo, hi) == smart_resize(h, w, 28, lo, hi), (w, h, lo, hi)


def test_matches_transformers_smart_resize():
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    for w, h in SIZES + _random_sizes(seed=1):
        for lo, hi in LIMITS:
            assert smart_resize_transformers(h, w, 28, lo, hi) == smart_resize(h, w, 28, lo, hi), (w, h, lo, hi)


@pytest.mark.parametrize("limits", [(LMMS_EVAL_MIN_PIXELS, LMMS_EVAL_MAX_PIXELS), (50176, 50176)])
def test_matches_lmms_eval_chat_pipeline(limits):
    """What lmms-eval's qwen2_5_vl chat backend does: qwen_vl_utils.fetch_image (no pixel limits in the message),
    then the HF processor loaded with min_pixels/max_pixels. The grid it reports is the size the model sees."""
    from PIL import Image
    from qwen_vl_utils import fetch_image

    from vrh_lmms.model.tiny.qwen2_5_vl import make_processor, make_tokenizer

    lo, hi = limits
    processor = make_processor(make_tokenizer(), min_pixels=lo, max_pixels=hi)
    for w, h in SIZES[:10] + [(w, h) for w, h in _random_sizes(60, seed=2) if max(w, h) <= 2500][:20]:
        fetched = fetch_image({"image": Image.new("RGB", (w, h))})
        grid = processor.image_processor(images=[fetched], return_tensors="pt")["image_grid_thw"][0].tolist()
        seen = (grid[2] * 14, grid[1] * 14)
        assert qwen2_5_vl_model_size(w, h, min_pixels=lo, max_pixels=hi) == seen, (w, h)


def test_simple_backend_passes_limits_to_fetch():
    from PIL import Image
    from qwen_vl_utils import fetch_image

    w, h = 4000, 3000
    fetched = fetch_image({"image": Image.new("RGB", (w, h)), "min_pixels": LMMS_EVAL_MIN_PIXELS,
                           "max_pixels": LMMS_EVAL_MAX_PIXELS})
    assert qwen2_5_vl_model_size(w, h, fetch_min_pixels=LMMS_EVAL_MIN_PIXELS,
                                 fetch_max_pixels=LMMS_EVAL_MAX_PIXELS) == fetched.size


@pytest.mark.parametrize("size", [(640, 480), (4000, 3000), (224, 224), (500, 333)])
def test_qwen25_box_round_trip(size):
    """A box drawn on the resized image maps back onto the same region of the original."""
    w, h = size
    rw, rh = qwen2_5_vl_model_size(w, h)
    gt = [0.1 * w, 0.2 * h, 0.6 * w, 0.9 * h]
    resized = [gt[0] * rw / w, gt[1] * rh / h, gt[2] * rw / w, gt[3] * rh / h]
    coords = ", ".join(f"{v:.4f}" for v in resized)
    reply = f'[{{"bbox_2d": [{coords}], "label": "x"}}]'
    box = get_convention("qwen2_5_vl").read_box(reply, (w, h)).box
    assert box == pytest.approx(gt, abs=1e-3)


def test_qwen25_params_change_the_mapping():
    conv = get_convention("qwen2_5_vl")
    reply = '{"bbox_2d": [0, 0, 224, 224]}'
    # demo settings: min = max = 224*224 keeps a 224 image at 224 -> identity
    assert conv.read_box(reply, (224, 224), min_pixels=50176, max_pixels=50176).box == [0, 0, 224, 224]
    # lmms-eval defaults upscale 224 -> 448: the same reply covers a quarter
    assert conv.read_box(reply, (224, 224)).box == [0, 0, 112, 112]


def test_bad_sizes_raise():
    with pytest.raises(ValueError, match="aspect ratio"):
        qwen2_5_vl_model_size(1000, 2)
    with pytest.raises(ValueError, match="positive"):
        qwen2_5_vl_model_size(0, 10)
