"""MiniCPM-V 4.6: `vrh_minicpmv` (our backend: lmms-eval's `minicpm_v` answers through the remote code's `chat`, which
a transformers-native checkpoint lacks), a tiny MiniCPMV4_6ForConditionalGeneration that answers per image and per
head set, its image-token layout against MiniCPMV4_6Processor at MiniCPM-V-4.6's settings, its box format read in its
convention, and discovery end to end.

- heads=none answers equal plain transformers greedy generation on the backend's prompt;
- ablated logits (on the exact inputs the backend passed to generate) equal the independent reference: eager
  attention with the heads' outputs zeroed;
- the layout accounts for exactly the image tokens the real processor writes at the published settings on 10 sizes
  (source view alone, 2 to 10 views), agrees with its `target_sizes`, and the token -> cell mapping is checked by
  experiment on the tiny model.
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

FAMILY = "minicpmv"
HEADS = "L0H1;L1H0"


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoints):
    return str(tiny_checkpoints(FAMILY))


def test_wrapper_registered_with_its_family():
    from vrh_lmms.model_wrappers.manifests import WRAPPERS
    from vrh_lmms.model_wrappers.minicpmv import VRHMiniCPMV

    assert VRHMiniCPMV.vrh_model_id() == "vrh_minicpmv" and "VRHMiniCPMV" in WRAPPERS["vrh_minicpmv"][1:]
    fam = get_family(FAMILY)
    assert fam.box_convention == "minicpmv" and "minicpmv" in CONVENTIONS and fam.layout == "minicpmv"
    assert fam.model_types == ("minicpmv4_6", "minicpmv4_7")


def test_heads_none_answers_like_plain_transformers(ckpt):
    """The backend's prompt (chat template: the image, then the task text), greedy generate, special tokens
    skipped; a left-padded batch answers as one prompt at a time."""
    from transformers import AutoProcessor, MiniCPMV4_6ForConditionalGeneration
    from vrh_lmms.model_wrappers.minicpmv import VRHMiniCPMV

    docs = scene_docs(3)
    model = MiniCPMV4_6ForConditionalGeneration.from_pretrained(ckpt, dtype=torch.bfloat16).eval()
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
    got = run(VRHMiniCPMV(pretrained=ckpt, heads="none"), docs)
    assert got == expected and len(set(expected)) > 1, expected
    # float32: one prompt at a time and the three left padded in one batch answer alike
    one = run(VRHMiniCPMV(pretrained=ckpt, heads="none", dtype="float32"), docs)
    assert run(VRHMiniCPMV(pretrained=ckpt, heads="none", dtype="float32", batch_size=3), docs) == one


@pytest.mark.exact
def test_ablated_logits_equal_eager_reference(ckpt):
    from vrh_lmms.model_wrappers.minicpmv import VRHMiniCPMV

    lm = VRHMiniCPMV(pretrained=ckpt, heads=HEADS, dtype="float32")
    model = lm.model
    with recorded_generate(model) as calls:
        run(lm, scene_docs(1), max_new_tokens=2)
    inputs = model_inputs(calls[0])
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
    """MiniCPM-V-4.6's processor (scale_resolution 448, patch 14, at most 9 slices, 16x downsampling) around the tiny
    tokenizer: every size's image tokens are covered, each view's grid is the processor's `target_sizes` / 16, each
    view's cells tile the image, and the sizes reach the source view alone and 2 to 10 views."""
    from transformers import AutoTokenizer

    from vrh_lmms.model.tiny.minicpmv import minicpmv_processor

    processor = minicpmv_processor(AutoTokenizer.from_pretrained(ckpt), scale=448, patch=14)
    views_seen = set()
    for w, h in SIZES:
        image = Image.new("RGB", (w, h), (90, 90, 90))
        batch = processor(text=[render_prompt(processor, scene_messages("it", image))], images=[image],
                          return_tensors="pt")
        tmap = image_token_map(FAMILY, batch["input_ids"][0], (w, h), layout_extras(FAMILY, processor, batch, 0))
        sizes = batch["target_sizes"].tolist()
        views = np.array(tmap.view)
        assert (views == "global").sum() == sizes[0][0] * sizes[0][1] // 16 and len(tmap.no_cell) == 0
        assert (views == "slice").sum() == sum(a * b // 16 for a, b in sizes[1:])
        cells = tmap.cells
        assert (cells[:, 0] >= 0).all() and (cells[:, 2] <= w + 1e-3).all()
        assert (cells[:, 1] >= 0).all() and (cells[:, 3] <= h + 1e-3).all()
        for view in ("global", "slice") if len(sizes) > 1 else ("global",):
            c = cells[torch.as_tensor(views == view)]
            assert float(((c[:, 2] - c[:, 0]) * (c[:, 3] - c[:, 1])).sum()) == pytest.approx(w * h, rel=1e-4)
        views_seen.add(len(sizes))
    assert 1 in views_seen and max(views_seen) == 10 and len(views_seen) >= 3, views_seen


@pytest.mark.exact
@pytest.mark.parametrize("size", [(150, 90), (90, 200), (300, 60), (230, 220), (100, 80)])
def test_layout_by_perturbation(size, ckpt):
    """A rectangle drawn on a flat image changes exactly the predicted tokens' inputs to text layer 0 (vision
    attention zeroed, the window merger's residual carrying each patch); all but (100, 80) are sliced, (230, 220)
    into 2 x 2."""
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
def test_boxes_read_in_minicpmv_convention():
    """MiniCPM-V answers `<ref>expr</ref><box>x1 y1 x2 y2</box>`, spaces between, per mille of the image."""
    conv = CONVENTIONS["minicpmv"]
    assert "<box>x1 y1 x2 y2</box>" in conv.prompt("the cat")
    box = conv.read_box("<ref>the cat</ref><box>250 250 750 750</box>", (200, 100))
    assert box.box == [50.0, 25.0, 150.0, 75.0] and box.n_boxes == 1
    assert conv.read_box("[250, 500, 750, 1000]", (200, 100)).box == [50.0, 50.0, 150.0, 100.0]
    assert conv.read_points("<box>0 0 500 500</box>", (100, 100)).points == [[25.0, 25.0]]


def test_hybrid_text_of_the_published_checkpoints_is_refused_in_one_line():
    """MiniCPM-V 4.6 / 4.7 ship Qwen3.5 text (linear-attention layers, a full-attention layer every fourth): the
    decoder locator names the first layer without heads to cut, before anything runs."""
    from transformers import MiniCPMV4_6Config, MiniCPMV4_6ForConditionalGeneration

    from vrh_lmms.base.errors import VRHError
    from vrh_lmms.model.backbone import locate_decoder
    from vrh_lmms.model.tiny.minicpmv import TEXT, VISION, minicpmv_tokenizer

    n = len(minicpmv_tokenizer())
    text = {**TEXT, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "num_hidden_layers": 4, "intermediate_size": 64, "vocab_size": n, "model_type": "qwen3_5_text",
            "layer_types": ["linear_attention"] * 3 + ["full_attention"]}
    with torch.device("meta"):
        model = MiniCPMV4_6ForConditionalGeneration(MiniCPMV4_6Config(text_config=text, vision_config=VISION,
                                                                      insert_layer_id=0))
    with pytest.raises(VRHError, match=r"^minicpmv: decoder layer 0 has no attention module \(self_attn\)$"):
        locate_decoder(model)


@pytest.mark.slow
def test_discovery_end_to_end(ckpt, tmp_path, monkeypatch):
    """vrh_synth_grounding through lmms-eval's evaluator and vrh_minicpmv: a complete heads file, box tokens found
    among the image tokens, mass on the box never above the mass on the image."""
    from vrh_lmms.base.heads.heads_file import load_heads_file
    from vrh_lmms.harness import lmms
    from vrh_lmms.runs.discovery.run import DiscoverySpec, run_discovery, sidecars
    from vrh_lmms.runs.discovery.scoring import all_cells
    from vrh_lmms.runs.discovery.store import PartStore

    monkeypatch.setenv("VRH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 2, "seed": 7, "scene": {"image_size": 168}}))
    args = f"pretrained={ckpt},dtype=float32"
    lm = lmms.build_model("vrh_minicpmv", args)
    out = tmp_path / "heads.json"
    run_discovery(DiscoverySpec(model="vrh_minicpmv", model_args=args, tasks=["vrh_synth_grounding"], output=str(out),
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
