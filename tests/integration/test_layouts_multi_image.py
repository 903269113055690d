"""Layouts of several images in one prompt (vrh_lmms.model.capture.multi_image).

- At the real checkpoints' geometry (processors built with the published settings around the tiny tokenizers):
  Qwen2.5-VL-7B (patch 14, merge 2, 3136..12845056 px), Qwen3-VL (patch 16, merge 2, size shortest_edge 65536,
  longest_edge 16777216, its preprocessor_config.json), InternVL3-hf (448 px tiles, 256 tokens a tile, 1..12
  tiles): for 2-4 images of different sizes in one prompt, every image's token count and cells are those the
  processor gives that image on its own (Qwen: its `image_grid_thw` row, the image split evenly into
  (gh / 2) x (gw / 2) cells; InternVL: 256 x its own tile count, each view tiling the image).
- By experiment on the tiny models: with vision attention zeroed, a rectangle drawn in image j only changes
  exactly the tokens the layout predicts for it in image j, and none of any other image's.
"""

from __future__ import annotations

import math

import pytest
import torch
from PIL import Image, ImageDraw

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model.capture.layouts import box_key_mask
from vrh_lmms.model.capture.multi_image import image_spans, image_token_maps
from vrh_lmms.model.capture.verify import clear_rect, layer0_inputs, zeroed_vision_attention
from vrh_lmms.model.tiny.inputs import load_tiny

# float-exact outcomes: CI runs these once more under ATEN_CPU_CAPABILITY=default (docs/contracts.md)
pytestmark = pytest.mark.exact

torch.set_num_threads(1)

SIZES = [[(640, 480), (97, 131)], [(1000, 250), (333, 1200), (56, 57)],
         [(1280, 720), (300, 50), (480, 640), (2000, 1500)]]


def conversation(images, text: str = "where is the red circle ?") -> list[dict]:
    return [{"role": "user", "content": [*({"type": "image", "image": im} for im in images),
                                          {"type": "text", "text": text}]}]


def prompt_batch(processor, images, **kwargs):
    text = processor.apply_chat_template(conversation(images), tokenize=False, add_generation_prompt=True)
    return processor(text=[text], images=list(images), return_tensors="pt", **kwargs)


def real_processor(family: str):
    if family == "qwen2_5_vl":
        from vrh_lmms.model.tiny import qwen2_5_vl as mod

        return mod.make_processor(mod.make_tokenizer(), patch_size=14, merge_size=2, min_pixels=3136,
                                  max_pixels=12845056)
    if family == "qwen3_vl":
        from vrh_lmms.model.tiny import qwen3_vl as mod

        return mod.make_processor(mod.make_tokenizer(), min_pixels=65536, max_pixels=16777216)
    from vrh_lmms.model.tiny import internvl as mod

    return mod.make_processor(mod.make_tokenizer(), vision={"image_size": [448, 448]}, max_patches=12)


def view_areas(tmap) -> dict[str, float]:
    out: dict[str, float] = {}
    for view, (x1, y1, x2, y2) in zip(tmap.view, tmap.cells.tolist()):
        out[view] = out.get(view, 0.0) + (x2 - x1) * (y2 - y1)
    return out


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl", "internvl"])
@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: f"{len(s)}images")
def test_real_geometry_per_image(family, sizes):
    processor = real_processor(family)
    images = [Image.new("RGB", s, (90, 90, 90)) for s in sizes]
    batch = prompt_batch(processor, images)
    ids = batch["input_ids"][0]
    maps = image_token_maps(family, ids, sizes, processor, batch)
    assert len(maps) == len(sizes)
    ends = [int(m.all_positions.max()) for m in maps]
    assert all(e < int(m.all_positions.min()) for e, m in zip(ends, maps[1:])), "images in sequence order"
    assert sum(len(m.all_positions) for m in maps) == int((ids == processor.image_token_id).sum())
    ip = processor.image_processor
    for i, ((w, h), tmap) in enumerate(zip(sizes, maps)):
        alone = ip(images=[images[i]], return_tensors="pt")
        if family == "internvl":
            n_tiles = int(alone["num_patches"][0])
            assert len(tmap.all_positions) == 256 * n_tiles
            assert len(tmap.no_cell) == 0
            views = view_areas(tmap)
            assert set(views) == ({"tile", "thumbnail"} if n_tiles > 1 else {"tile"})
            for area in views.values():
                assert math.isclose(area, w * h, rel_tol=1e-4)
            continue
        _, gh, gw = (int(v) for v in alone["image_grid_thw"][0])
        assert torch.equal(batch["image_grid_thw"][i], alone["image_grid_thw"][0])
        rows, cols = gh // 2, gw // 2
        assert len(tmap.positions) == rows * cols and len(tmap.no_cell) == 0
        expect = torch.tensor([[c * w / cols, r * h / rows, (c + 1) * w / cols, (r + 1) * h / rows]
                               for r in range(rows) for c in range(cols)], dtype=torch.float32)
        torch.testing.assert_close(tmap.cells, expect, atol=1e-3, rtol=0)


@pytest.mark.parametrize("family", ["qwen2_5_vl", "internvl"])
def test_spans_that_do_not_match_the_images_are_refused(family):
    processor = real_processor(family)
    sizes = [(640, 480), (97, 131)]
    batch = prompt_batch(processor, [Image.new("RGB", s) for s in sizes])
    ids = batch["input_ids"][0]
    with pytest.raises(VRHError, match=r"^(the internvl prompt shows 2 images but 3 image sizes are given"
                                       r"|qwen2_5_vl processor output has 2 image_grid_thw rows for 3 images)$"):
        image_token_maps(family, ids, sizes + [(10, 10)], processor, batch)
    if family == "internvl":  # a wrong size tiles differently (Qwen's count is its grid row's, whatever the size)
        with pytest.raises(VRHError, match=r"^image 1 \(448x448\): layout predicts 256 image tokens but the input "
                                           r"has 3328 placeholders"):
            image_token_maps(family, ids, [(640, 480), (448, 448)], processor, batch)
    cut = ids[: int(torch.nonzero(ids == processor.image_token_id).flatten()[-1])]  # drops the last end marker
    with pytest.raises(VRHError, match="unbalanced image markers"):
        image_spans(family, cut, processor.tokenizer, processor.image_token_id)
    with pytest.raises(VRHError, match="several images per prompt are mapped for internvl, qwen2_5_vl, qwen3_vl "
                                       "layouts, not 'paligemma'"):
        image_spans("paligemma", ids, processor.tokenizer, processor.image_token_id)


# ------------------------------------------------------------------------------------ perturbation, tiny models
TINY_SIZES = [(150, 90), (97, 131), (200, 120)]


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen3_vl", "internvl"])
def tiny(request, tiny_checkpoints):
    model, processor = load_tiny(tiny_checkpoints(request.param))
    return request.param, model, processor


@pytest.mark.parametrize("j", [0, 2])
def test_rectangle_in_one_image_changes_only_its_predicted_tokens(tiny, j):
    family, model, processor = tiny
    flats = [Image.new("RGB", s, (128, 128, 128)) for s in TINY_SIZES]
    batch = prompt_batch(processor, flats)
    ids = batch["input_ids"][0]
    maps = image_token_maps(family, ids, TINY_SIZES, processor, batch)
    rect, clearance = clear_rect(maps[j], (0.2, 0.3, 0.55, 0.7))
    assert clearance >= 3.0, f"rectangle edges only {clearance:.1f} px from a cell border"
    drawn = flats[j].copy()
    ImageDraw.Draw(drawn).rectangle([rect[0], rect[1], rect[2] - 1, rect[3] - 1], fill=(250, 20, 20))
    batch2 = prompt_batch(processor, flats[:j] + [drawn] + flats[j + 1:])
    assert torch.equal(batch2["input_ids"], batch["input_ids"])
    with zeroed_vision_attention(model) as hooked:
        a, b = layer0_inputs(model, batch), layer0_inputs(model, batch2)
    assert hooked > 0
    changed = set(torch.nonzero((a[0] - b[0]).abs().amax(-1) > 1e-6).flatten().tolist())
    predicted = set(torch.nonzero(box_key_mask(maps[j], rect, ids.numel(), rule="any")).flatten().tolist())
    assert 0 < len(changed) < len(maps[j].all_positions), "the perturbation must be local to be informative"
    assert changed == predicted, (f"{family} image {j} rect {rect}: changed-only {sorted(changed - predicted)}, "
                                  f"predicted-only {sorted(predicted - changed)}")
    others = {p for i, m in enumerate(maps) if i != j for p in m.all_positions.tolist()}
    assert not changed & others
