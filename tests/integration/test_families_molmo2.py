"""Molmo 2: `vrh_molmo2` (our backend: lmms-eval has none), a tiny Molmo2ForConditionalGeneration that answers per
image and per head set, its image-token layout against Molmo2Processor at Molmo2-8B's settings, its pointing
format read in its convention, and discovery end to end.

- heads=none answers equal plain transformers greedy generation on the backend's prompt (no lmms-eval backend to
  compare with);
- ablated logits (on the exact inputs the backend passed to generate) equal the independent reference: eager
  attention with the heads' outputs zeroed, under the model's own masks (bidirectional among image tokens);
- the layout accounts for exactly the `<im_patch>` tokens the real processor writes at the published settings on 12
  sizes (global view and 1 to 8 overlapping crops), agrees with its `image_grids`, and the token -> cell mapping is
  checked by experiment on the tiny model.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from oracles.reference_ablation import reference_ablation
from PIL import Image
from support.wrappers import model_inputs, recorded_generate, run, scene_docs

from vrh_lmms.base.boxes.known import CONVENTIONS
from vrh_lmms.base.families import get_family
from vrh_lmms.base.heads import HeadRef
from vrh_lmms.model.capture.extras import layout_extras
from vrh_lmms.model.capture.layouts import image_token_map
from vrh_lmms.model.capture.verify import check_layout
from vrh_lmms.model.tiny.inputs import load_tiny, render_prompt, scene_messages

torch.set_num_threads(1)

FAMILY = "molmo2"
HEADS = "L0H1;L1H0"


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoints):
    return str(tiny_checkpoints(FAMILY))


def test_wrapper_registered_with_its_family():
    from vrh_lmms.model_wrappers.manifests import WRAPPERS
    from vrh_lmms.model_wrappers.molmo2 import VRHMolmo2

    assert VRHMolmo2.vrh_model_id() == "vrh_molmo2" and "VRHMolmo2" in WRAPPERS["vrh_molmo2"][1:]
    fam = get_family(FAMILY)
    assert fam.box_convention == "molmo2" and "molmo2" in CONVENTIONS and fam.layout == "molmo2"


def test_heads_none_answers_like_plain_transformers(ckpt):
    """The backend's prompt (chat template: the image, then the task text), greedy generate, special tokens
    skipped; a left-padded batch answers as one prompt at a time."""
    from transformers import AutoProcessor, Molmo2ForConditionalGeneration
    from vrh_lmms.model_wrappers.molmo2 import VRHMolmo2

    docs = scene_docs(3)
    model = Molmo2ForConditionalGeneration.from_pretrained(ckpt, dtype=torch.bfloat16).eval()
    processor = AutoProcessor.from_pretrained(ckpt)
    expected = []
    for doc in docs.values():
        message = [{"role": "user", "content": [{"type": "image"},
                                                {"type": "text", "text": f"Locate {doc['expression']} in the image."}]}]
        prompt = processor.apply_chat_template(message, add_generation_prompt=True, tokenize=False)
        inputs = processor(text=[prompt], images=[doc["image"]], return_tensors="pt")
        inputs["pixel_values"] = inputs["pixel_values"].to(torch.bfloat16)
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=6, do_sample=False)
        expected.append(processor.tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))
    got = run(VRHMolmo2(pretrained=ckpt, heads="none"), docs)
    assert got == expected and len(set(expected)) > 1, expected
    # float32: one prompt at a time and the three left padded in one batch answer alike
    one = run(VRHMolmo2(pretrained=ckpt, heads="none", dtype="float32"), docs)
    assert run(VRHMolmo2(pretrained=ckpt, heads="none", dtype="float32", batch_size=3), docs) == one


@pytest.mark.exact
def test_ablated_logits_equal_eager_reference(ckpt):
    from vrh_lmms.model_wrappers.molmo2 import VRHMolmo2

    lm = VRHMolmo2(pretrained=ckpt, heads=HEADS, dtype="float32")
    model = lm.model
    with recorded_generate(model) as calls:
        run(lm, scene_docs(1), max_new_tokens=2)
    inputs = model_inputs(calls[0])
    assert inputs["mm_token_type_ids"].sum() > 0  # the bidirectional image block is in play
    with torch.no_grad():
        got = model(**inputs).logits
        lm.vrh_ablator.restore()
        clean = model(**inputs).logits
        with reference_ablation(model, [HeadRef(0, 1), HeadRef(1, 0)], base="eager"):
            ref = model(**inputs).logits
    assert (clean - ref).abs().max() > 1e-2, "the ablation must move the logits for the comparison to mean much"
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)


def test_tiny_answers_depend_on_image_and_heads(ckpt):
    """Six scenes, one prompt: at least four different answers; ablating two heads changes some answer."""
    from vrh_lmms.base.heads.spec import HeadSet
    from vrh_lmms.model.ablation import Ablator
    from vrh_lmms.model.backbone import locate_decoder

    model, processor = load_tiny(ckpt)
    docs = scene_docs(6)

    def answers() -> list[str]:
        out = []
        for doc in docs.values():
            text = render_prompt(processor, scene_messages("the object", doc["image"]))
            batch = processor(text=[text], images=[doc["image"]], return_tensors="pt")
            with torch.no_grad():
                ids = model.generate(**batch, max_new_tokens=4, do_sample=False)
            out.append(processor.tokenizer.decode(ids[0, batch["input_ids"].shape[1]:]))
        return out

    plain = answers()
    assert len(set(plain)) >= 4, plain
    ablator = Ablator(model, locate_decoder(model))
    ablator.apply(HeadSet(heads=(HeadRef(0, 1), HeadRef(1, 0)), spec=HEADS, kind="explicit", k=2), mode="zero")
    assert answers() != plain


# ------------------------------------------------------------------------------------- layout vs processor
SIZES = [(640, 480), (480, 640), (97, 131), (1000, 250), (250, 1000), (30, 30), (333, 334), (1200, 90),
         (90, 700), (2000, 1500), (2400, 1200), (4000, 500)]


@pytest.mark.exact
def test_layout_counts_equal_real_processor(ckpt):
    """Molmo2-8B's processor (378 px crops, patch 14, 8 crops, margins 4 / 4, 2 x 2 pooling) around the tiny
    tokenizer: every size's `<im_patch>` tokens are covered, the global view is 14 x 14, the crop view's grid is
    the processor's `image_grids`, and the sizes reach 1 to 8 crops."""
    from transformers import AutoTokenizer

    from vrh_lmms.model.tiny.molmo2 import molmo2_processor

    processor = molmo2_processor(AutoTokenizer.from_pretrained(ckpt), crop=378, patch=14)
    crops_seen = set()
    for w, h in SIZES:
        image = Image.new("RGB", (w, h), (90, 90, 90))
        batch = processor(text=[render_prompt(processor, scene_messages("it", image))], images=[image],
                          return_tensors="pt")
        tmap = image_token_map(FAMILY, batch["input_ids"][0], (w, h), layout_extras(FAMILY, processor, batch, 0))
        low_h, low_w, high_h, high_w = batch["image_grids"][0].tolist()
        views = np.array(tmap.view)
        assert (low_h, low_w) == (14, 14) and (views == "global").sum() == 14 * 14
        assert (views == "crops").sum() == high_h * high_w and len(tmap.no_cell) == 0
        cells = tmap.cells
        assert (cells[:, 0] >= 0).all() and (cells[:, 2] <= w + 1e-3).all()
        assert (cells[:, 1] >= 0).all() and (cells[:, 3] <= h + 1e-3).all()
        # each view tiles the whole image: the cell areas add up to it
        for view in ("global", "crops"):
            c = cells[torch.as_tensor(views == view)]
            assert float(((c[:, 2] - c[:, 0]) * (c[:, 3] - c[:, 1])).sum()) == pytest.approx(w * h, rel=1e-4)
        crops_seen.add(int(batch["image_num_crops"][0]) - 1)
    assert min(crops_seen) == 1 and max(crops_seen) == 8 and len(crops_seen) >= 3, crops_seen


def test_pooled_spans_follow_the_processor_padding():
    """27 patches pooled by 2 (the published global view): 13 full windows, then a last one of one patch (the pad
    goes after); 9 patches pooled by 3 pad nothing; 10 by 4: one pad before, one after."""
    from vrh_lmms.model.capture.tilings_molmo2 import pooled_spans

    s = pooled_spans(27, 2, 14.0)
    assert len(s) == 14 and s[0] == (0.0, 28.0) and s[-1] == (364.0, 378.0)
    assert pooled_spans(9, 3, 1.0) == ((0, 3), (3, 6), (6, 9))
    assert pooled_spans(10, 4, 1.0) == ((0, 3), (3, 7), (7, 10))


@pytest.mark.exact
@pytest.mark.parametrize("size", [(150, 90), (90, 200), (300, 60), (97, 131)])
def test_layout_by_perturbation(size, ckpt):
    """A rectangle drawn on a flat image changes exactly the predicted tokens' inputs to text layer 0 (vision
    attention zeroed, the adapter's window pooling kept); (300, 60) and (90, 200) tile into several crops."""
    model, processor = load_tiny(ckpt)

    def batch_of(proc, image):
        return proc(text=[render_prompt(proc, scene_messages("the red square", image))], images=[image],
                    return_tensors="pt")

    for frac in [(0.2, 0.3, 0.55, 0.7), (0.6, 0.05, 0.95, 0.4)]:
        check = check_layout(model, processor, FAMILY, size, batch_of, frac=frac)
        assert check.hooked > 0 and check.clearance >= 2.0
        assert 0 < len(check.changed) < check.image_tokens
        assert check.changed == check.predicted, (size, sorted(check.changed ^ check.predicted))


# ------------------------------------------------------------------------------------------- points, discovery
def test_points_read_in_molmo2_convention():
    """Molmo 2 points per mille of the image (`<points coords="image id x y ...">`); a box is asked as its two
    corners and read from the first two points; a point task reads every point."""
    conv = CONVENTIONS["molmo2"]
    assert conv.pointing_prompt("the cat") == "Point to the cat."
    assert "corner" in conv.prompt("the cat")
    reply = 'Counting the <points coords="1 1 073 160 2 173 600" alt="boats">the boats</points> shows 2.'
    pts = conv.read_points(reply, (1000, 500))
    assert not pts.from_boxes and pts.points == [[73.0, 80.0], [173.0, 300.0]]
    box = conv.read_box('<points coords="1 1 250 250 2 750 750" alt="cat">cat</points>', (200, 100))
    assert box.box == [50.0, 25.0, 150.0, 75.0]
    two_frames = '<points coords="1 1 100 200;2 1 300 400">x</points>'
    assert conv.read_points(two_frames, (1000, 1000)).points == [[100.0, 200.0], [300.0, 400.0]]
    assert conv.read_box("no points here", (10, 10)).box is None


@pytest.mark.slow
def test_discovery_end_to_end(ckpt, tmp_path, monkeypatch):
    """vrh_synth_grounding through lmms-eval's evaluator and vrh_molmo2: a complete heads file, box tokens found
    among the image tokens, mass on the box never above the mass on the image."""
    from vrh_lmms.base.heads.heads_file import load_heads_file
    from vrh_lmms.harness import lmms
    from vrh_lmms.runs.discovery.run import DiscoverySpec, run_discovery, sidecars
    from vrh_lmms.runs.discovery.scoring import all_cells
    from vrh_lmms.runs.discovery.store import PartStore

    monkeypatch.setenv("VRH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 2, "seed": 7, "scene": {"image_size": 168}}))
    args = f"pretrained={ckpt},dtype=float32"
    lm = lmms.build_model("vrh_molmo2", args)
    out = tmp_path / "heads.json"
    run_discovery(DiscoverySpec(model="vrh_molmo2", model_args=args, tasks=["vrh_synth_grounding"], output=str(out),
                                limit=2, gen_kwargs="max_new_tokens=6"), lm=lm)
    hf = load_heads_file(out)
    assert hf.model["family"] == FAMILY and hf.geometry == lm.vrh_decoder.geometry
    assert hf.scoring["n_samples"] == 2 and set(hf.cells) == set(all_cells())
    store = PartStore(sidecars(out)["parts"])
    assert store.keys()
    for key in store.keys():
        meta = store.read(key).meta
        assert meta["n_image_tokens"] > 0 and meta["n_box_tokens"] >= 1 and meta["rows"]["in"] >= 1, meta
    assert np.nanmax(np.asarray(hf.cells["out,sum,mean"]["scores"])) <= 1 + 1e-6
