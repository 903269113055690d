"""LLaVA-1.5, LLaVA-OneVision, Gemma 3, Idefics3 / SmolVLM, Mistral 3 and Llama 4: wrappers over
lmms-eval's backends, tiny checkpoints that answer per image and per head set, image-token layouts
against the real processors at the published checkpoints' settings, and discovery end to end.

- heads=none answers equal the unwrapped lmms-eval backend's (Idefics3: the backend cannot load it, so plain
  transformers greedy generation on the backend's prompt);
- ablated logits (on the exact inputs the backend passed to generate) equal the independent reference: eager
  attention with the heads' outputs zeroed, under the model's own masks (Gemma 3: bidirectional inside each image,
  a sliding window shorter than the prompt on layer 0);
- the tiny checkpoints give different answers on different images, and ablating heads moves answers;
- the layouts account for exactly the placeholders the real processor classes write at the published settings
  (LLaVA-1.5: CLIP 336 centre crop; OneVision: 384 px tiles up to 6 x 6 with anyres_max_9 pooling; Gemma 3: 896 px,
  256 tokens, pan-and-scan on and off) on 10 sizes, and the token -> cell mapping is checked by experiment on the
  tiny models (a rectangle drawn on a flat image changes exactly the predicted tokens).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from lmms_eval.models.simple.llava_hf import VICUNA_CHAT_TEMPLATE
from PIL import Image
from support.family_checks import (
    check_ablated_logits_equal_eager_reference,
    check_answers_depend_on_image_and_heads,
    check_discovery_end_to_end,
)
from support.wrappers import run, scene_docs

from vrh_lmms.base.boxes.known import CONVENTIONS
from vrh_lmms.base.families import get_family
from vrh_lmms.model.capture.extras import layout_extras
from vrh_lmms.model.capture.layouts import image_token_map
from vrh_lmms.model.capture.verify import check_layout
from vrh_lmms.model.tiny.inputs import as_float32, load_tiny, render_prompt, scene_messages

torch.set_num_threads(1)

W, S, C = "vrh_lmms.model_wrappers", "lmms_eval.models.simple", "lmms_eval.models.chat"
HEADS = "L0H1;L1H0"
# (family, wrapper class, lmms-eval base class, extra model args)
CASES = [
    ("llava", f"{W}.llava:VRHLlavaChat", f"{C}.llava_hf:LlavaHf", {}),
    ("llava", f"{W}.llava:VRHLlava", f"{S}.llava_hf:LlavaHf", {"chat_template": VICUNA_CHAT_TEMPLATE}),
    ("llava_onevision", f"{W}.llava:VRHLlavaOneVisionChat", f"{C}.llava_hf:LlavaHf", {}),
    ("gemma3", f"{W}.gemma3:VRHGemma3", f"{S}.gemma3:Gemma3", {}),
    ("idefics3", f"{W}.idefics3:VRHIdefics3", f"{S}.idefics2:Idefics2", {}),
    ("mistral3", f"{W}.mistral3:VRHMistral3", f"{S}.mistral3_vl:Mistral3_VL", {}),
    ("llama4", f"{W}.llama4:VRHLlama4", f"{S}.llama4_scout:Llama4Scout", {}),
]
FAMILIES = ["llava", "llava_onevision", "gemma3", "idefics3", "mistral3", "llama4"]  # Molmo 2: test_families_molmo2


def _cls(path: str):
    import importlib

    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


@pytest.fixture(params=CASES, ids=lambda c: c[1].rsplit(":")[-1])
def case(request):
    return request.param


def test_wrapper_registered_over_its_backend(case):
    from vrh_lmms.model_wrappers.manifests import WRAPPERS

    family, wrapper, base, _ = case
    cls = _cls(wrapper)
    model_id = cls.vrh_model_id()
    assert model_id == f"vrh_{family}" and cls.__name__ in WRAPPERS[model_id][1:]
    assert get_family(family).box_convention in CONVENTIONS
    assert issubclass(cls, _cls(base)) and cls.is_simple == _cls(base).is_simple and cls.vrh_family == family


def test_heads_none_answers_like_the_base_backend(case, tiny_checkpoints):
    family, wrapper, base, kwargs = case
    if family == "idefics3":
        pytest.skip("lmms-eval's idefics2 backend cannot load Idefics3 (see the plain-transformers test below)")
    ckpt = str(tiny_checkpoints(family))
    docs = scene_docs(3)
    expected = run(_cls(base)(pretrained=ckpt, device="cpu", device_map="cpu", **kwargs), docs)
    got = run(_cls(wrapper)(pretrained=ckpt, heads="none", **kwargs), docs)
    assert got == expected and len(set(expected)) > 1, expected


@pytest.mark.parametrize("family,wrapper", [("gemma3", f"{W}.gemma3:VRHGemma3"), ("llama4", f"{W}.llama4:VRHLlama4"),
                                            ("idefics3", f"{W}.idefics3:VRHIdefics3")])
def test_batch_of_two_left_padded_equals_batch_of_one(family, wrapper, tiny_checkpoints):
    """Backends that batch (left padding; Gemma 3 also pads to a multiple of 8): each sample answers as alone, also
    with Gemma 3's bidirectional image blocks and Llama 4's chunked attention under the padding."""
    from support.wrappers import assert_batch_two_equals_one

    ckpt = str(tiny_checkpoints(family))
    assert_batch_two_equals_one(lambda bs: _cls(wrapper)(pretrained=ckpt, heads=HEADS, dtype="float32",
                                                         batch_size=bs), scene_docs(3))


def test_smolvlm_without_num2words_is_one_line_before_loading(tiny_checkpoints, tmp_path):
    """A SmolVLM checkpoint (model_type smolvlm: Idefics3's classes and layout, its own processor, which needs
    num2words) is refused in one line naming the package when it is missing, before any weight loads."""
    import importlib.util
    import shutil

    from vrh_lmms.base.errors import VRHError
    from vrh_lmms.model_wrappers.idefics3 import VRHIdefics3

    if importlib.util.find_spec("num2words") is not None:
        pytest.skip("num2words is installed here")
    ckpt = tmp_path / "smolvlm"
    shutil.copytree(tiny_checkpoints("idefics3"), ckpt)
    config = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**config, "model_type": "smolvlm",
                                                  "architectures": ["SmolVLMForConditionalGeneration"]}))
    (ckpt / "model.safetensors").write_bytes(b"not weights")  # loading them would fail differently
    with pytest.raises(VRHError, match=r"SmolVLM checkpoint, whose processor needs the Python package num2words"):
        VRHIdefics3(pretrained=str(ckpt))


@pytest.mark.parametrize("family,wrapper,base,bs", [
    ("gemma3", f"{W}.gemma3:VRHGemma3", f"{S}.gemma3:Gemma3", 1),
    ("llama4", f"{W}.llama4:VRHLlama4", f"{S}.llama4_scout:Llama4Scout", 2)])
def test_pads_left_whatever_the_tokenizer_says(family, wrapper, base, bs, tiny_checkpoints, tmp_path):
    """lmms-eval's gemma3 pads each request to a multiple of 8, llama4_scout pads batches, on the tokenizer's side:
    with a right-padding tokenizer they generate after pad tokens; the wrappers answer as with a left-padding one."""
    import shutil

    ckpt = tmp_path / "right"
    shutil.copytree(tiny_checkpoints(family), ckpt)
    config = json.loads((ckpt / "tokenizer_config.json").read_text())
    (ckpt / "tokenizer_config.json").write_text(json.dumps({**config, "padding_side": "right"}))
    docs = scene_docs(3)
    expected = run(_cls(wrapper)(pretrained=str(tiny_checkpoints(family)), batch_size=bs), docs)
    assert run(_cls(wrapper)(pretrained=str(ckpt), batch_size=bs), docs) == expected
    assert run(_cls(base)(pretrained=str(ckpt), device="cpu", device_map="cpu", batch_size=bs), docs) != expected


def test_idefics3_heads_none_answers_like_plain_transformers(tiny_checkpoints):
    """The backend's prompt (chat template over an image item and the text, image splitting off as the backend
    sets it), greedy generate, special tokens skipped."""
    from transformers import AutoProcessor, Idefics3ForConditionalGeneration

    from vrh_lmms.model_wrappers.idefics3 import VRHIdefics3

    ckpt = str(tiny_checkpoints("idefics3"))
    docs = scene_docs(3)
    model = Idefics3ForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float16).eval()
    processor = AutoProcessor.from_pretrained(ckpt, do_image_splitting=False)
    expected = []
    for doc in docs.values():
        message = [{"role": "user", "content": [{"type": "image"},
                                                {"type": "text", "text": f"Locate {doc['expression']} in the image."}]}]
        prompt = processor.apply_chat_template(message, add_generation_prompt=True)
        inputs = processor(text=[prompt], images=[[doc["image"]]], return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=6, do_sample=False)
        expected.append(processor.tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))
    got = run(VRHIdefics3(pretrained=ckpt, heads="none"), docs)
    assert got == expected and len(set(expected)) > 1, expected


def test_mistral3_generate_error_is_raised_not_an_empty_answer(tiny_checkpoints, monkeypatch):
    """lmms-eval's mistral3_vl answers "" when generate raises; vrh_mistral3 raises it once the batch is done."""
    from vrh_lmms.base.errors import VRHError
    from vrh_lmms.model_wrappers.mistral3 import VRHMistral3

    lm = VRHMistral3(pretrained=str(tiny_checkpoints("mistral3")))
    docs = scene_docs(2)
    assert all(run(lm, docs))

    def broken(**kwargs):
        raise RuntimeError("out of memory (simulated)")

    monkeypatch.setattr(lm._model, "generate", broken)
    with pytest.raises(VRHError, match=r"generate failed on 2 of 2 requests: out of memory \(simulated\)"):
        run(lm, docs)


@pytest.mark.exact
def test_ablated_logits_equal_eager_reference(case, tiny_checkpoints):
    family, wrapper, _, kwargs = case
    # left-padding positions are left out of the comparison (the Gemma 3 backend pads to a multiple of 8)
    check_ablated_logits_equal_eager_reference(_cls(wrapper), str(tiny_checkpoints(family)), HEADS, **kwargs)


@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_answers_depend_on_image_and_heads(family, tiny_checkpoints):
    """Six scenes, one prompt: at least four different answers; ablating two heads changes some answer."""
    check_answers_depend_on_image_and_heads(tiny_checkpoints(family), max_new_tokens=5, prepare=as_float32)


def test_tiny_gemma3_and_llama4_exercise_their_attention_masks(tiny_checkpoints):
    """What the ablation, capture and batch checks above run through is really there: Gemma 3's sliding window and
    Llama 4's attention chunk are shorter than a prompt, Gemma 3's image blocks are bidirectional (dropping
    token_type_ids changes the logits), and Llama 4 has a NoPE layer, a chunked one and a MoE layer."""
    from vrh_lmms.model.tiny.inputs import processor_inputs

    model, processor = load_tiny(tiny_checkpoints("gemma3"))
    batch = processor_inputs(processor, n=1)
    text = model.config.text_config
    assert set(text.layer_types) == {"sliding_attention", "full_attention"}
    assert text.sliding_window < batch["input_ids"].shape[1]
    with torch.no_grad():
        both = model(**batch).logits
        causal = model(**{k: v for k, v in batch.items() if k != "token_type_ids"}).logits
    assert (both - causal).abs().max() > 1e-3
    model, processor = load_tiny(tiny_checkpoints("llama4"))
    text = model.config.text_config
    assert text.attention_chunk_size < processor_inputs(processor, n=1)["input_ids"].shape[1]
    assert sorted(text.no_rope_layers) == [0, 1] and text.moe_layers == [1]


# ------------------------------------------------------------------------------------- layouts vs processors
SIZES = [(640, 480), (480, 640), (97, 131), (1000, 250), (250, 1000), (30, 30), (333, 334), (1200, 90),
         (90, 700), (2000, 1500)]


def _published_processor(family: str, **over):
    """The real processor class at the published checkpoint's settings, around the tiny tokenizer."""
    from vrh_lmms.model.tiny import gemma, llava

    if family == "llava":  # llava-hf/llava-1.5-7b-hf: CLIP 336, patch 14, 576 tokens
        from transformers import AutoTokenizer

        return llava.llava_processor(AutoTokenizer.from_pretrained(over["ckpt"]), side=336, **over.get("kw", {}))
    if family == "llava_onevision":  # llava-onevision-qwen2-7b-ov-hf: 384 px tiles, 27 x 27, pinpoints to 2304
        from transformers import AutoTokenizer

        return llava.onevision_processor(AutoTokenizer.from_pretrained(over["ckpt"]), tile=384, patch=14)
    if family == "idefics3":  # Idefics3-8B-Llama3: 364 px tiles, longest edge 4 x 364, 169 tokens a tile
        from transformers import AutoTokenizer, Idefics3ImageProcessor, Idefics3Processor

        ip = Idefics3ImageProcessor(size={"longest_edge": 4 * 364}, max_image_size={"longest_edge": 364},
                                    do_image_splitting=over.get("split", True))
        tok = AutoTokenizer.from_pretrained(over["ckpt"])
        return Idefics3Processor(image_processor=ip, tokenizer=tok, image_seq_len=169, chat_template=tok.chat_template)
    if family == "mistral3":  # Mistral-Small-3.1: longest edge 1540, patch 14, 2 x 2 merge
        from transformers import AutoTokenizer

        from vrh_lmms.model.tiny import mistral3

        return mistral3.mistral3_processor(AutoTokenizer.from_pretrained(over["ckpt"]), longest_edge=1540)
    if family == "llama4":  # Llama-4-Scout: 336 px tiles, patch 14, pixel shuffle 0.5 (144 a tile), 16 tiles
        from transformers import AutoTokenizer

        from vrh_lmms.model.tiny import llama4

        return llama4.llama4_processor(AutoTokenizer.from_pretrained(over["ckpt"]), tile=336, max_patches=16)
    # gemma-3-4b-it: 896 px, 256 tokens (pan-and-scan is a call-time option: see the test)
    return gemma.gemma3_processor(gemma.gemma3_tokenizer(), image_size=896, tokens=256)


PUBLISHED = [("llava", {}), ("llava", {"kw": {"do_pad": True}}), ("llava_onevision", {}), ("gemma3", {}),
             ("gemma3", {"pan_and_scan": True}), ("idefics3", {}), ("idefics3", {"split": False}), ("mistral3", {}),
             ("llama4", {})]


@pytest.mark.exact
@pytest.mark.parametrize("family,over", PUBLISHED, ids=["llava-crop", "llava-pad", "onevision", "gemma3",
                                                         "gemma3-pan-and-scan", "idefics3-split", "idefics3-whole",
                                                         "mistral3", "llama4"])
def test_layout_counts_equal_real_processor(family, over, tiny_checkpoints):
    processor = _published_processor(family, ckpt=tiny_checkpoints(family), **over)
    views_seen = set()
    for w, h in SIZES:
        image = Image.new("RGB", (w, h), (90, 90, 90))
        batch = processor(text=[render_prompt(processor, scene_messages("it", image))], images=[image],
                          return_tensors="pt", **({"do_pan_and_scan": True} if over.get("pan_and_scan") else {}))
        extras = layout_extras(family, processor, batch, 0)
        tmap = image_token_map(family, batch["input_ids"][0], (w, h), extras)  # raises unless the counts agree
        cells = tmap.cells
        assert len(tmap.positions) > 0
        assert (cells[:, 0] >= 0).all() and (cells[:, 2] <= w + 1e-3).all()
        assert (cells[:, 1] >= 0).all() and (cells[:, 3] <= h + 1e-3).all()
        views_seen |= set(tmap.view)
    expect = {"llava": {"image"}, "llava_onevision": {"base", "anyres"},
              "gemma3": {"image", "crop"} if over.get("pan_and_scan") else {"image"},
              "idefics3": {"tile", "global"} if over.get("split", True) else {"global"},
              "mistral3": {"image"}, "llama4": {"tile", "global"}}[family]
    assert views_seen == expect


def test_onevision_pooling_and_gemma3_crops_at_published_settings(tiny_checkpoints):
    """The two tiling decisions the counts depend on, spelled out: OneVision pools a 2000 x 1500 image's 5 x 4 tile
    grid (135 x 108 features > 1.1^2 x 9 tiles) and Gemma 3 cuts a 1200 x 300 image into 4 crops of 300 px, a
    1000 x 250 one (crops under 256 px) not at all."""
    from vrh_lmms.model.capture.tilings_crops import gemma3_crops, onevision_anyres, pan_and_scan_crops

    ov = onevision_anyres(2000, 1500, {"tile_size": 384, "base_side": 27, "vision_aspect_ratio": "anyres_max_9",
                                       "grid_pinpoints": [[r * 384, c * 384] for r in range(1, 7)
                                                          for c in range(1, 7)]})
    assert len(ov[1].ys) * len(ov[1].xs) < 9 * 27 * 27 * 1.21
    assert pan_and_scan_crops(1200, 300, 256, 4, 1.2) == [(0, 0, 300, 300), (300, 0, 300, 300),
                                                          (600, 0, 300, 300), (900, 0, 300, 300)]
    assert pan_and_scan_crops(1000, 250, 256, 4, 1.2) == pan_and_scan_crops(300, 280, 256, 4, 1.2) == []
    assert [b.view for b in gemma3_crops(1200, 300, {"tokens_per_image": 256, "do_pan_and_scan": True,
                                                      "pan_and_scan_min_crop_size": 256,
                                                      "pan_and_scan_max_num_crops": 4,
                                                      "pan_and_scan_min_ratio_to_activate": 1.2})] == \
        ["image"] + ["crop"] * 4


@pytest.mark.exact
@pytest.mark.parametrize("w,h", [(640, 480), (200, 500), (97, 131)])
def test_llava_centre_crop_geometry_equals_processor(w, h):
    """CLIP's crop at 336, read off the processed pixels: the first and last crop columns / rows show the original
    coordinates the layout's outer cells start and end at (the image encodes x in red, y in green)."""
    from transformers import CLIPImageProcessor

    from vrh_lmms.model.capture.tilings_crops import clip_square

    xs = np.linspace(0, 255, w)[None, :].repeat(h, 0)
    ys = np.linspace(0, 255, h)[:, None].repeat(w, 1)
    image = Image.fromarray(np.stack([xs, ys, np.zeros_like(xs)], -1).round().astype(np.uint8))
    px = CLIPImageProcessor(size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336},
                            do_normalize=False)(image, return_tensors="pt")["pixel_values"][0] * 255
    (grid,) = clip_square(w, h, {"crop_size": 336, "base_side": 24, "shortest_edge": 336})
    # red at crop column 0 / 335 ~ 255 * x / (w - 1) at the first / last cell's outer edge (+- one source pixel)
    for got, edge, size in ((px[0, 168, 0], grid.xs[0][0], w), (px[0, 168, -1], grid.xs[-1][1], w),
                            (px[1, 0, 168], grid.ys[0][0], h), (px[1, -1, 168], grid.ys[-1][1], h)):
        assert abs(float(got) / 255 * (size - 1) - edge) <= 2.0 + size / 336, (got, edge, size)


@pytest.mark.exact
@pytest.mark.parametrize("family,size", [("llava", (150, 90)), ("llava", (97, 131)), ("llava_onevision", (150, 90)),
                                         ("llava_onevision", (300, 50)), ("gemma3", (150, 90)),
                                         ("gemma3-pas", (1200, 300)), ("gemma3-pas", (280, 800)),
                                         ("idefics3", (150, 90)), ("idefics3", (90, 200)),
                                         ("mistral3", (150, 90)), ("mistral3", (300, 700)),
                                         ("llama4", (150, 90)), ("llama4", (97, 131)), ("llama4", (40, 30))])
def test_layout_by_perturbation(family, size, tiny_checkpoints):
    """A rectangle drawn on a flat image changes exactly the predicted tokens' inputs to text layer 0 (Gemma 3 with
    pan-and-scan asked for at call time, its default crop settings: 4 and 3 crops here)."""
    model, processor = load_tiny(tiny_checkpoints(family.split("-")[0]))
    call = {"do_pan_and_scan": True} if family.endswith("-pas") else {}

    def batch_of(proc, image):
        return as_float32(proc(text=[render_prompt(proc, scene_messages("the red square", image))], images=[image],
                               return_tensors="pt", **call))

    for frac in [(0.2, 0.3, 0.55, 0.7), (0.6, 0.05, 0.95, 0.4)]:
        check = check_layout(model, processor, family.split("-")[0], size, batch_of, frac=frac)
        assert check.hooked > 0 and check.clearance >= 2.0
        assert 0 < len(check.changed) < check.image_tokens
        assert check.changed == check.predicted, (family, size, sorted(check.changed ^ check.predicted))


# ------------------------------------------------------------------------------------------- boxes, discovery
def test_box_conventions_read_each_family_format():
    """LLaVA-1.5 answers fractions of the padded square; OneVision (LLaVA-NeXT data) fractions of the image;
    Gemma 3, Idefics3 / SmolVLM, Mistral 3 and Llama 4, with no documented box format, are asked for 0-1000 and read so
    (fractions accepted)."""
    llava = CONVENTIONS[get_family("llava").box_convention]
    assert llava.read_box("[0.25, 0.375, 0.75, 0.625]", (200, 100)).box == [50.0, 25.0, 150.0, 75.0]
    ov = CONVENTIONS[get_family("llava_onevision").box_convention]
    assert ov.read_box("[0.25, 0.25, 0.75, 0.75]", (200, 100)).box == [50.0, 25.0, 150.0, 75.0]
    gemma = CONVENTIONS[get_family("gemma3").box_convention]
    assert {get_family(f).box_convention for f in ("idefics3", "mistral3", "llama4")} == {gemma.name}
    assert "0-1000" in gemma.prompt("the cat")
    assert gemma.read_box("[250, 250, 750, 750]", (200, 100)).box == [50.0, 25.0, 150.0, 75.0]


@pytest.mark.slow
@pytest.mark.parametrize("model_id,family", [("vrh_llava", "llava"), ("vrh_llava_onevision", "llava_onevision"),
                                             ("vrh_gemma3", "gemma3"), ("vrh_smolvlm", "idefics3"),
                                             ("vrh_mistral3", "mistral3"), ("vrh_llama4", "llama4")])
def test_discovery_end_to_end(model_id, family, tiny_checkpoints, tmp_path, monkeypatch):
    """vrh_synth_grounding through lmms-eval's evaluator and the family's wrapper (support.family_checks)."""
    check_discovery_end_to_end(model_id, family, tiny_checkpoints(family), tmp_path, monkeypatch)
