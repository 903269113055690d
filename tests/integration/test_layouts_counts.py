"""Layout geometry against the processors themselves, over many image sizes (processors only, no model runs).

The perturbation tests (test_layouts.py) pin the token -> cell mapping for a few sizes; these pin the tiling
decisions (tile grids, unpadding, splits, padding offsets) for extreme aspect ratios, tiny and large images.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from vrh_lmms.model.capture.extras import layout_extras
from vrh_lmms.model.capture.layouts import image_token_map
from vrh_lmms.model.capture.remote_logic import deepseek_vl2_best_resolution, phi4_hd_canvas
from vrh_lmms.model.capture.tilings import BUILDERS, Gap, Grid, _pil_pad_geometry, deepseek_vl_geometry, idefics3_split
from vrh_lmms.model.tiny.inputs import render_prompt, scene_messages
from vrh_lmms.model.tiny.registry import TINY_FACTORIES as TINY

# float-exact outcomes: CI runs these once more under ATEN_CPU_CAPABILITY=default (docs/contracts.md)
pytestmark = pytest.mark.exact

SIZES = [(640, 480), (97, 131), (1000, 250), (250, 1000), (30, 30), (333, 334), (1200, 90), (90, 700), (56, 57)]
FAMILIES = ["qwen2_5_vl", "qwen3_vl", "glm4v", "internvl", "llava_next", "paligemma", "idefics3",
            "qwen2_5_omni", "qwen3_5"]
FAMILIES.append("llava_onevision1_5")  # Qwen2-VL's image processor, temporal_patch_size 1


@pytest.mark.parametrize("family", FAMILIES)
def test_token_counts_match_processor(family, tiny_checkpoints):
    """Every size: the layout accounts for exactly the placeholders the processor wrote, cells inside the image."""
    if family not in TINY:
        pytest.skip(f"no tiny {family} checkpoint in vrh_lmms.model.tiny.registry yet")
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_checkpoints(family))
    for w, h in SIZES:
        image = Image.new("RGB", (w, h), (90, 90, 90))
        batch = processor(text=[render_prompt(processor, scene_messages("it", image))], images=[image],
                          return_tensors="pt")
        tmap = image_token_map(family, batch["input_ids"][0], (w, h), layout_extras(family, processor, batch, 0))
        assert len(tmap.positions) > 0
        cells = tmap.cells
        assert (cells[:, 0] >= 0).all() and (cells[:, 2] <= w + 1e-3).all()
        assert (cells[:, 1] >= 0).all() and (cells[:, 3] <= h + 1e-3).all()
        assert (cells[:, 2] > cells[:, 0]).all() and (cells[:, 3] > cells[:, 1]).all()
        # Each view tiles the image: its cells' areas add up to the image area (no gaps, no overlaps). LLaVA-NeXT's
        # unpadding truncates (int(round(...))), so its any-res view may drop a few edge pixel rows or columns.
        for view in set(tmap.view):
            sel = torch.tensor([v == view for v in tmap.view])
            area = float(((cells[sel, 2] - cells[sel, 0]) * (cells[sel, 3] - cells[sel, 1])).sum())
            if view == "anyres":
                assert 0.8 * w * h <= area <= w * h * (1 + 1e-4), (family, (w, h), view, area)
            else:
                assert math.isclose(area, w * h, rel_tol=1e-4), (family, (w, h), view, area)


PHI4_SIZES = [(640, 480), (480, 640), (1000, 300), (123, 457), (448, 448), (3000, 200), (3000, 2500)]


@pytest.mark.parametrize("size", PHI4_SIZES)
def test_phi4_counts_and_canvas_match_hf_processor(size):
    """Phi-4 multimodal (read from code): token count and HD canvas equal transformers' image processor."""
    from transformers import Phi4MultimodalImageProcessor

    w, h = size
    processor = Phi4MultimodalImageProcessor()
    out = processor(Image.new("RGB", (w, h), (0, 0, 0)), return_tensors="pt")
    blocks = BUILDERS["phi4_multimodal"](w, h, {"crop_size": 448, "patch_size": 14, "dynamic_hd": 36})
    assert sum(b.n_tokens for b in blocks) == int(out["num_img_tokens"][0])
    (tw, th), (nw, nh) = phi4_hd_canvas(w, h, 448, 36)
    assert out["image_sizes"][0].tolist() == [th, tw]
    crops = out["image_pixel_values"][0, 1: 1 + (tw // 448) * (th // 448)]
    canvas = crops.reshape(th // 448, tw // 448, 3, 448, 448).permute(2, 0, 3, 1, 4).reshape(3, th, tw)
    dark = (canvas[0] < 0).nonzero()  # the black image; padding is white
    assert dark[:, 0].max() + 1 == nh and dark[:, 1].max() + 1 == nw


@pytest.mark.parametrize("size", [(640, 480), (480, 640), (384, 384), (123, 457), (1000, 301)])
def test_deepseek_vl_padding_matches_hf_processor(size):
    from transformers import DeepseekVLImageProcessor

    w, h = size
    processor = DeepseekVLImageProcessor(do_normalize=False)
    px = processor(Image.new("RGB", (w, h), (255, 255, 255)), return_tensors="pt")["pixel_values"][0, 0]
    nw, nh, x, y = deepseek_vl_geometry(w, h, 384)
    ys, xs = (px > 0.9).nonzero(as_tuple=True)
    assert (int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1) == (x, y, x + nw, y + nh)
    blocks = BUILDERS["deepseek_vl"](w, h, {"image_size": 384, "n_tokens": 576})
    assert sum(b.n_tokens for b in blocks) == 576


CANDIDATES = [[384, 384], [384, 768], [768, 384], [768, 768], [384, 1152], [1152, 384]]


@pytest.mark.parametrize("size", [(640, 480), (1000, 300), (123, 457), (801, 799)])
def test_deepseek_vl2_pad_geometry_matches_pil(size):
    """DeepSeek-VL2 pads with PIL ImageOps.pad: our paste geometry equals PIL's for both views."""
    w, h = size
    image = Image.new("RGB", (w, h), (255, 255, 255))
    for tw, th in [(384, 384), deepseek_vl2_best_resolution((w, h), CANDIDATES)]:
        bbox = np.array(ImageOps.pad(image, (tw, th), color=(0, 0, 0)).convert("L")) > 128
        ys, xs = bbox.nonzero()
        nw, nh, x, y = _pil_pad_geometry(w, h, tw, th)
        assert (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1) == (x, y, x + nw, y + nh)


def test_deepseek_vl2_token_formula():
    """768 x 384 -> 2 x 1 tiles: global 14 x (14 + 1), separator, local 14 x (28 + 1) = 617 (processor formula)."""
    blocks = BUILDERS["deepseek_vl2"](768, 384, {"image_size": 384, "patch_size": 14, "downsample_ratio": 2,
                                                 "candidate_resolutions": CANDIDATES})
    assert [type(b) for b in blocks] == [Grid, Gap, Grid]
    assert sum(b.n_tokens for b in blocks) == 14 * 15 + 1 + 14 * (2 * 14 + 1)
    # The ViT sees 27 x 14 = 378 px of each 384 tile; the last token of a tile row covers 14 px, then a 6 px gap.
    local_xs = blocks[2].xs
    assert local_xs[13] == (364.0, 378.0) and local_xs[14] == (384.0, 412.0)


@pytest.mark.parametrize("size", [(150, 90), (97, 131), (30, 30), (1000, 250), (5000, 100)])
def test_idefics3_split_matches_processor(size):
    from transformers import Idefics3ImageProcessor

    w, h = size
    processor = Idefics3ImageProcessor(size={"longest_edge": 4 * 112}, max_image_size={"longest_edge": 112})
    out = processor(Image.new("RGB", (w, h)), return_row_col_info=True, return_tensors="pt")
    assert idefics3_split(w, h, 4 * 112, 112) == (out["rows"][0][0], out["cols"][0][0])
