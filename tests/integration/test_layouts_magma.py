"""Magma-8B image-token layout at its real geometry (512 px crops, up to 4 crops, ConvNeXt stride 32).

Magma's processor writes one `<image>` per image; `MagmaForCausalLM.forward` puts rows x 16 feature rows of
cols x 16 features, each ended by `row_seperator`, where it was. The oracle (tests/oracles/magma_standin.py)
re-implements the published processor and stitching (checked against microsoft/Magma @ 1b784e4 when written:
equal `image_sizes` and pixel values, bit for bit, on 11 sizes; equal stitching order for 8 grids); here the layout
is checked against it token by token, by experiment on a stand-in model, and through discovery end to end.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from oracles import magma_standin as ms
from PIL import Image

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model.capture.extras import layout_extras
from vrh_lmms.model.capture.layouts import box_key_mask, box_token_indices, image_token_map, lm_input_ids

# float-exact outcomes: CI runs these once more under ATEN_CPU_CAPABILITY=default (docs/contracts.md)
pytestmark = pytest.mark.exact

torch.set_num_threads(1)
# Landscape, portrait, panoramas each way (1 x 4 and 4 x 1 crops), 2 x 2, tiny, square, 1 x 3, LLaVA-style sizes.
SIZES = [(640, 480), (480, 640), (5000, 300), (300, 5000), (2000, 1500), (30, 30), (512, 512), (1025, 511),
         (333, 500), (1920, 1080)]
SIDE = ms.BASE_IMG_SIZE // ms.STRIDE  # 16 features per crop side
SPECIALS = ("<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<pad>", "<image>",
            "<image_start>", "<image_end>")
CHAT = ("{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' + "
        "m['content'] + '<|eot_id|>' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")


@pytest.fixture(scope="module")
def tokenizer():
    from vrh_lmms.model.tiny.vocab import build_tokenizer

    return build_tokenizer(SPECIALS, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>", pad_token="<pad>",
                           chat_template=CHAT, add_bos_token=False)


@pytest.fixture(scope="module")
def processor(tokenizer):
    return ms.MagmaProcessor(ms.MagmaImageProcessor(), tokenizer)


def _batch(processor, image):
    """What vrh_magma passes to generate: the processor's output with a batch axis on pixels and image sizes."""
    out = dict(processor(texts="user: <image_start><image><image_end>\nfind the dog", images=[image]))
    return {k: (v.unsqueeze(0) if k in ("pixel_values", "image_sizes") else v) for k, v in out.items()}


def _oracle_cells(w: int, h: int, rows: int, cols: int) -> list[tuple[float, float, float, float] | None]:
    """Each image position's cell in original pixels, from the forward's own stitching of crop features."""
    cw, ch = cols * ms.BASE_IMG_SIZE, rows * ms.BASE_IMG_SIZE  # the canvas the image is squashed onto
    out = []
    for item in ms.feature_order(rows, cols, SIDE):
        if item is None:
            out.append(None)
            continue
        cr, cc, fy, fx = item
        x1, y1 = cc * ms.BASE_IMG_SIZE + fx * ms.STRIDE, cr * ms.BASE_IMG_SIZE + fy * ms.STRIDE
        out.append((x1 * w / cw, y1 * h / ch, (x1 + ms.STRIDE) * w / cw, (y1 + ms.STRIDE) * h / ch))
    return out


def _map(processor, size):
    w, h = size
    batch = _batch(processor, Image.new("RGB", size, (90, 90, 90)))
    extras = layout_extras("magma", processor, batch, 0)
    ids = lm_input_ids("magma", batch["input_ids"][0], size, extras)
    return batch, extras, ids, image_token_map("magma", ids, size, extras)


def test_every_registered_family_has_a_layout():
    """Discovery maps image tokens through the family's layout; Magma was the one family without (issue 28.5)."""
    from vrh_lmms.base.families import FAMILIES
    from vrh_lmms.model.capture.layouts import layout_name

    # vrh_hf's generic record runs any checkpoint and has no image layout of its own: discovery needs a family's
    no_layout = {name for name, family in FAMILIES.items() if family.layout is None}
    assert no_layout == {"hf"}
    assert {name: layout_name(name) for name in FAMILIES if name not in no_layout}["magma"] == "magma"


def test_family_of_published_magma_config():
    """MagmaConfig copies its text config's attributes onto itself: the instance says model_type "llama" (as the
    published class does under transformers 5.25); the family still resolves, through the config class."""
    from vrh_lmms.base.families import family_for_config

    config = ms.build(64, 5).config
    assert config.model_type == "llama" and type(config).model_type == "magma"
    assert family_for_config(config).name == "magma"


@pytest.mark.parametrize("size", SIZES)
def test_layout_equals_published_expansion(size, processor):
    """Token count, order and cells equal the oracle's: every image position holds the crop feature (or the row
    separator) that MagmaForCausalLM.forward puts there, its cell the 32 px canvas block mapped to the image."""
    w, h = size
    batch, extras, ids, tmap = _map(processor, size)
    rows, cols = ms.crop_grid(w, h)
    assert extras["image_sizes"] == [rows, cols] and extras["crop_size"] == 512
    assert batch["pixel_values"].shape[1] == rows * cols  # what the model's vision tower receives
    oracle = _oracle_cells(w, h, rows, cols)
    start = int((batch["input_ids"][0] == extras["image_token_id"]).nonzero()[0])
    assert ids.numel() == batch["input_ids"].shape[1] - 1 + len(oracle) == batch["input_ids"].shape[1] - 1 + \
        rows * SIDE * (cols * SIDE + 1)
    assert tmap.no_cell.tolist() == [start + k for k, c in enumerate(oracle) if c is None]
    assert tmap.positions.tolist() == [start + k for k, c in enumerate(oracle) if c is not None]
    want = torch.tensor([c for c in oracle if c is not None], dtype=torch.float32)
    torch.testing.assert_close(tmap.cells, want, rtol=0, atol=1e-3)
    assert set(tmap.view) == {"crop"}
    area = float(((tmap.cells[:, 2] - tmap.cells[:, 0]) * (tmap.cells[:, 3] - tmap.cells[:, 1])).sum())
    assert area == pytest.approx(w * h, rel=1e-4)  # the squashed canvas covers the image once, no padding


@pytest.mark.parametrize("crop", [512, 480, 448])
def test_convnext_grid_is_crop_over_32(crop):
    """The ConvNeXt trunk (timm's, as open_clip wraps it) outputs crop // 32 features a side, the layout's side."""
    import timm

    from vrh_lmms.model.capture.tilings import magma_crops

    net = timm.create_model("convnext_atto", pretrained=False).eval()
    with torch.no_grad():
        side = net.forward_features(torch.zeros(1, 3, crop, crop)).shape[-1]
    (grid,) = magma_crops(crop, crop, {"image_sizes": [1, 1], "crop_size": crop})
    assert side == crop // 32 == len(grid.xs) == len(grid.ys)


def test_box_selects_overlapping_cells(processor):
    """A box maps to exactly the image positions whose oracle cells overlap it (rule "any"), and to those at
    least half inside it (rule "overlap"), in the language model's sequence."""
    w, h = 640, 480  # 1 x 2 crops: 16 rows of 32 features + separator
    batch, extras, ids, tmap = _map(processor, (w, h))
    start = int((batch["input_ids"][0] == extras["image_token_id"]).nonzero()[0])
    box = [100.0, 50.0, 300.0, 200.0]
    want_any, want_half = set(), set()
    for k, cell in enumerate(_oracle_cells(w, h, 1, 2)):
        if cell is None:
            continue
        ix = min(cell[2], box[2]) - max(cell[0], box[0])
        iy = min(cell[3], box[3]) - max(cell[1], box[1])
        if ix > 0 and iy > 0:
            want_any.add(start + k)
            if ix * iy >= 0.5 * (cell[2] - cell[0]) * (cell[3] - cell[1]):
                want_half.add(start + k)
    got_any = set(box_key_mask(tmap, box, ids.numel(), rule="any").nonzero().flatten().tolist())
    got_half = set(tmap.positions[box_token_indices(tmap, box, rule="overlap")].tolist())
    assert got_any == want_any and got_half == want_half
    # cells of 640 / 32 = 20 px by 480 / 16 = 30 px: 10 columns x 6 rows touched, the top row only a third inside
    assert len(want_any) == 10 * 6 and len(want_half) == 10 * 5
    assert all(ids[p] == extras["image_token_id"] for p in got_any)


def test_unexpanded_ids_and_bad_input_are_refused(processor):
    batch, extras, ids, _ = _map(processor, (640, 480))
    raw = batch["input_ids"][0]
    with pytest.raises(VRHError, match="expands its one image placeholder inside the model's forward"):
        image_token_map("magma", raw, (640, 480), extras)
    assert torch.equal(lm_input_ids("magma", ids, (640, 480), extras), ids)  # idempotent
    two = torch.cat([raw, raw])
    with pytest.raises(VRHError, match="2 image placeholders; its layout covers one image per sample"):
        lm_input_ids("magma", two, (640, 480), extras)
    sizes = {**batch, "image_sizes": torch.tensor([[[1, 2], [1, 1]]])}
    with pytest.raises(VRHError, match="has 2 images; layouts cover one image per sample"):
        layout_extras("magma", processor, sizes, 0)
    with pytest.raises(VRHError, match="anyres strategy 'tiles'"):
        image_token_map("magma", ids, (640, 480), {**extras, "anyres_strategy": "tiles"})
    other = lm_input_ids("qwen2_5_vl", raw, (640, 480), {"image_token_id": extras["image_token_id"]})
    assert other is raw  # processors that write every placeholder themselves are left alone


def test_layout_by_experiment_on_stand_in(processor, tokenizer):
    """A rectangle drawn on a flat image changes exactly the layer-0 inputs of the tokens the layout predicts,
    through the stand-in's published-shape merge (sequence positions of the language model)."""
    from vrh_lmms.model.capture.verify import check_layout

    model = ms.build(len(tokenizer), tokenizer.convert_tokens_to_ids("<image>"))
    for size in [(640, 480), (300, 900)]:
        check = check_layout(model, processor, "magma", size, _batch)
        assert check.changed == check.predicted and check.predicted, size
        assert check.clearance >= 2.0


# ----------------------------------------------------------------------------------- discovery end to end
CAPTURE_SIZES = [(640, 480), (300, 900)]  # 1 x 2 and 2 x 1 crops (after Magma's resolution choice)


def _refcoco_rows(folder, sizes, split="testA"):
    """lmms-lab-encoder/RefCOCO schema: question_id, image, question, answer, segmentation, bbox (xywh), iscrowd,
    file_name."""
    import datasets

    rng = np.random.default_rng(0)
    rows = []
    for i, (w, h) in enumerate(sizes):
        pixels = rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
        rows.append({"question_id": str(i), "image": Image.fromarray(pixels), "question": "Describe the area.",
                     "answer": ["the left dog"], "segmentation": [0.1 * w, 0.2 * h, 0.4 * w, 0.6 * h],
                     "bbox": [0.1 * w, 0.2 * h, 0.3 * w, 0.4 * h], "iscrowd": 0,
                     "file_name": f"COCO_train2014_{100 + i:012d}_{i}.jpg"})
    ds = datasets.Dataset.from_list(rows).cast_column("image", datasets.Image())
    folder.mkdir(parents=True, exist_ok=True)
    ds.to_parquet(str(folder / f"{split}.parquet"))
    return folder


@pytest.fixture
def magma_stand_in(monkeypatch, tokenizer, processor):
    """vrh_magma loading the stand-in through AutoModelForCausalLM / AutoProcessor (trust_remote_code)."""
    import transformers

    def model_from_pretrained(path, **kwargs):
        assert kwargs.get("trust_remote_code") is True
        # float32 whatever the backend asks (bfloat16): captured and eager attention then agree to 1e-6, not 1e-4
        return ms.build(len(tokenizer), tokenizer.convert_tokens_to_ids("<image>"))

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", model_from_pretrained)
    monkeypatch.setattr(transformers.AutoProcessor, "from_pretrained", lambda path, **kw: processor)


def test_discovery_runs_end_to_end_on_magma(magma_stand_in, tmp_path, vrh_env, monkeypatch):
    """Discovery through vrh_magma: every doc captured over the language model's (expanded) sequence, and each
    doc's captured image and box mass equal the eager attention the model's own forward returns."""
    from vrh_lmms.base.heads.heads_file import load_heads_file
    from vrh_lmms.model_wrappers.magma import VRHMagma
    from vrh_lmms.runs.discovery.collector import SampleCollector, teacher_forced_inputs
    from vrh_lmms.runs.discovery.controls import IMAGE_MASS
    from vrh_lmms.runs.discovery.run import DiscoverySpec, run_discovery, sidecars
    from vrh_lmms.runs.discovery.store import PartStore

    vrh_env.setenv("VRH_REFCOCO_DATA", str(_refcoco_rows(tmp_path / "refcoco", CAPTURE_SIZES)))
    lm = VRHMagma(pretrained="microsoft/Magma-8B")
    model = lm.model
    calls = []
    collect = SampleCollector.__call__
    monkeypatch.setattr(SampleCollector, "__call__", lambda self, ctx, tensors, *a, **k: (
        calls.append(dict(tensors)), collect(self, ctx, tensors, *a, **k))[1])
    out = tmp_path / "heads.json"
    run_discovery(DiscoverySpec(model="vrh_magma", model_args="pretrained=microsoft/Magma-8B",
                                tasks=["vrh_refcoco_testA"], output=str(out), limit=len(CAPTURE_SIZES),
                                gen_kwargs="max_new_tokens=3"), lm=lm)
    hf = load_heads_file(out)
    g = lm.vrh_decoder.geometry
    assert hf.scores.shape == (g.layers, g.heads) == (2, 4) and np.isfinite(hf.scores).all()
    store = PartStore(sidecars(out)["parts"])
    parts = sorted((store.read(k) for k in store.keys()), key=lambda p: p.meta["doc_id"])
    assert len(parts) == len(calls) == len(CAPTURE_SIZES)
    image_id = model.config.image_token_index
    for part, (w, h), call in zip(parts, CAPTURE_SIZES, calls, strict=True):
        rows, cols = ms.crop_grid(w, h)
        assert call["image_sizes"].tolist() == [[[rows, cols]]]
        assert part.meta["n_image_tokens"] == rows * SIDE * cols * SIDE
        assert part.meta["prompt_len"] == call["input_ids"].shape[1] - 1 + rows * SIDE * (cols * SIDE + 1)
        assert part.meta["n_box_tokens"] >= 1 and part.meta["n_answer"] >= 1
        # reference: the model's own forward with eager attention weights over its merged sequence
        answer = torch.as_tensor(part.answer_ids[:part.meta["n_answer"]])
        tensors = {k: v for k, v in call.items() if isinstance(v, torch.Tensor)}
        inputs = teacher_forced_inputs(tensors, answer)
        model.language_model.config._attn_implementation = "eager"
        with torch.no_grad():
            att = model(**inputs, output_attentions=True).attentions
        seq = lm_input_ids("magma", inputs["input_ids"][0], (w, h), layout_extras("magma", lm.processor, call, 0,
                                                                                   backend=lm))
        assert att[0].shape[-1] == seq.numel()  # the expanded sequence is the one the attention runs over
        is_image = (seq == image_id).float()
        prompt_len = part.meta["prompt_len"]
        out_rows = list(range(prompt_len - 1, prompt_len - 1 + part.meta["n_answer"]))
        ref = torch.stack([a[0][:, out_rows].float() @ is_image for a in att]).mean(-1)
        np.testing.assert_allclose(part.stats[IMAGE_MASS], ref.numpy(), atol=1e-5)
        # the box's keys from the oracle's cells (at least half inside the GT box), not from the layout
        gt = [0.1 * w, 0.2 * h, 0.4 * w, 0.6 * h]
        start = int((call["input_ids"][0] == image_id).nonzero()[0])
        in_box = torch.zeros(seq.numel())
        for k, c in enumerate(_oracle_cells(w, h, rows, cols)):
            if c is not None:
                ix, iy = min(c[2], gt[2]) - max(c[0], gt[0]), min(c[3], gt[3]) - max(c[1], gt[1])
                in_box[start + k] = float(ix > 0 and iy > 0 and ix * iy >= 0.5 * (c[2] - c[0]) * (c[3] - c[1]))
        assert int(in_box.sum()) == part.meta["n_box_tokens"]
        ref_box = torch.stack([a[0][:, out_rows].float() @ in_box for a in att]).mean(-1)
        np.testing.assert_allclose(part.stats["out_sum"], ref_box.numpy(), atol=1e-6)
        assert np.ptp(ref_box.numpy()) > 1e-4  # the heads differ by far more than the tolerance
