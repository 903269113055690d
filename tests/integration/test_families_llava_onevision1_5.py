"""LLaVA-OneVision-1.5: `vrh_llava_onevision1_5` over lmms-eval's `llava_onevision1_5` backend (simple and chat),
a tiny `LlavaOnevision15ForConditionalGeneration` (RICE-ViT tower, Qwen3 text) that answers per image and per head
set, the image-token layout against the real processor at the published settings, the generic box prompt, and
discovery end to end.

- the unwrapped backend cannot load a transformers-format checkpoint (AutoModelForCausalLM knows no such class); with
  only its class corrected it answers as vrh_llava_onevision1_5 with heads=none, and both as plain transformers
  greedy generation;
- ablated logits (on the exact inputs the backend passed to generate) equal the independent eager reference;
- the layout accounts for exactly the image tokens the real processor writes at the published settings (and after
  the backend's own qwen_vl_utils resize) on 12 sizes, and the token -> cell mapping is checked by experiment.
"""

from __future__ import annotations

import math

import pytest
import torch
from PIL import Image
from support import family_checks as checks
from support.wrappers import run, scene_docs

from vrh_lmms.base.boxes.known import CONVENTIONS
from vrh_lmms.base.families import get_family
from vrh_lmms.model.capture.extras import layout_extras
from vrh_lmms.model.capture.layouts import image_token_map
from vrh_lmms.model.tiny.inputs import render_prompt, scene_messages

torch.set_num_threads(1)

FAMILY = "llava_onevision1_5"


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoints):
    return str(tiny_checkpoints(FAMILY))


def test_wrapper_registered_over_its_backend():
    from lmms_eval.models.chat.llava_onevision1_5 import Llava_OneVision1_5 as Chat
    from lmms_eval.models.simple.llava_onevision1_5 import Llava_OneVision1_5 as Simple

    from vrh_lmms.model_wrappers.llava_onevision1_5 import VRHLlavaOneVision15, VRHLlavaOneVision15Chat
    from vrh_lmms.model_wrappers.manifests import WRAPPERS

    assert WRAPPERS["vrh_llava_onevision1_5"][1:] == ("VRHLlavaOneVision15", "VRHLlavaOneVision15Chat")
    assert issubclass(VRHLlavaOneVision15, Simple) and issubclass(VRHLlavaOneVision15Chat, Chat)
    assert not VRHLlavaOneVision15Chat.is_simple
    fam = get_family(FAMILY)
    assert fam.model_types == ("llava_onevision1_5",) and fam.layout == "qwen2_5_vl"


def test_tiny_checkpoint_is_the_real_class(ckpt):
    """The class, processor and tower the checks below run through: RICE-ViT's class token and 2-D patch
    convolution, Qwen3 text with q/k norms, the processor AutoProcessor builds for the type (one frame per patch)."""
    from transformers import AutoProcessor

    from vrh_lmms.model.tiny.inputs import load_tiny

    model, _ = load_tiny(ckpt)
    processor = AutoProcessor.from_pretrained(ckpt)
    assert type(model).__name__ == "LlavaOnevision15ForConditionalGeneration"
    assert model.config.text_config.model_type == "qwen3"
    assert hasattr(model.model.visual, "cls_embeddings") and model.model.visual.patch_embed.proj.kernel_size == (14, 14)
    assert hasattr(model.model.language_model.layers[0].self_attn, "q_norm")
    assert type(processor).__name__ == "Exaone4_5_Processor"
    assert processor.image_processor.temporal_patch_size == 1 and processor.image_processor.merge_size == 2


@pytest.mark.parametrize("frames", [1, 2])
def test_the_tower_takes_one_frame_per_patch(ckpt, frames):
    """Why the published settings say temporal_patch_size=1: the tower's 2-D patch convolution reads each pixel row
    as 3 x 14 x 14 values, so Qwen2-VL's default of 2 frames per patch gives it twice the patches its grid says."""
    from transformers import AutoTokenizer

    from vrh_lmms.model.tiny.inputs import load_tiny
    from vrh_lmms.model.tiny.llava_onevision1_5 import make_processor

    model, _ = load_tiny(ckpt)
    processor = make_processor(AutoTokenizer.from_pretrained(ckpt))
    processor.image_processor.temporal_patch_size = frames
    image = Image.new("RGB", (112, 84), (90, 90, 90))
    batch = processor(text=[render_prompt(processor, scene_messages("it", image))], images=[image],
                      return_tensors="pt")
    with torch.no_grad():
        if frames == 1:
            assert model(**batch).logits.shape[1] == batch["input_ids"].shape[1]
        else:
            with pytest.raises(RuntimeError, match="split_sizes"):  # 2 x 48 patch rows for a 48-patch grid
                model(**batch)


def test_unwrapped_backend_cannot_load_the_transformers_class(ckpt):
    """The fault the wrapper corrects: the backend's AutoModelForCausalLM has no class for llava_onevision1_5; the
    correction is undone once the wrapper has loaded."""
    import lmms_eval.models.simple.llava_onevision1_5 as backend_module
    from lmms_eval.models.simple.llava_onevision1_5 import Llava_OneVision1_5 as Simple
    from transformers import AutoModelForCausalLM

    from vrh_lmms.model_wrappers.llava_onevision1_5 import VRHLlavaOneVision15

    with pytest.raises(ValueError, match="AutoModelForCausalLM"):
        Simple(pretrained=ckpt, device="cpu", device_map="cpu")
    VRHLlavaOneVision15(pretrained=ckpt, heads="none")
    assert backend_module.AutoModelForCausalLM is AutoModelForCausalLM


def test_other_model_type_refused_in_one_line(tiny_checkpoints):
    from vrh_lmms.base.errors import VRHError
    from vrh_lmms.model_wrappers.llava_onevision1_5 import VRHLlavaOneVision15

    with pytest.raises(VRHError, match=r"model_type 'qwen2_5_vl'; expected llava_onevision1_5") as err:
        VRHLlavaOneVision15(pretrained=str(tiny_checkpoints("qwen2_5_vl")), heads="none")
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------------------------- layout vs processor
SIZES = [(640, 480), (480, 640), (97, 131), (1000, 250), (250, 1000), (30, 30), (333, 334), (1200, 90),
         (90, 700), (2000, 1500), (4000, 500), (3000, 3000)]
# lmms-eval's llava_onevision1_5 backend (lmms-lab/LLaVA-OneVision-1.5-8B-Instruct's evaluation settings) passes
# min_pixels=256*28*28 and max_pixels=1605632 (2048 cells of 28 px) to AutoProcessor.from_pretrained; the image
# processor is Qwen2VLImageProcessor with 14 px patches merged 2 x 2 and temporal_patch_size=1 (the tower embeds
# one frame per patch)
PUBLISHED_PIXELS = {"min_pixels": 256 * 28 * 28, "max_pixels": 1605632}
# transformers' Qwen2VLImageProcessor defaults, what a checkpoint without pixel bounds gets outside lmms-eval
DEFAULT_PIXELS = {"min_pixels": 56 * 56, "max_pixels": 28 * 28 * 1280}


def _count_and_tile(processor, image: Image.Image, size: tuple[int, int], **call) -> int:
    """The layout of one processed image: it must account for exactly the processor's image tokens (image_token_map
    raises otherwise), and its cells must tile the original image; returns the token count."""
    w, h = size
    batch = processor(text=[render_prompt(processor, scene_messages("it", image))], images=[image],
                      return_tensors="pt", **call)
    extras = layout_extras(FAMILY, processor, batch, 0)
    tmap = image_token_map(FAMILY, batch["input_ids"][0], (w, h), extras)
    t, gh, gw = (int(v) for v in batch["image_grid_thw"][0])
    image_id = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert t == 1 and len(tmap.positions) == int((batch["input_ids"][0] == image_id).sum()) == gh * gw // 4
    cells = tmap.cells
    assert (cells[:, 0] >= 0).all() and (cells[:, 2] <= w + 1e-3).all()
    assert (cells[:, 1] >= 0).all() and (cells[:, 3] <= h + 1e-3).all()
    area = float(((cells[:, 2] - cells[:, 0]) * (cells[:, 3] - cells[:, 1])).sum())
    assert math.isclose(area, w * h, rel_tol=1e-4), (size, area)
    return len(tmap.positions)


@pytest.mark.exact
@pytest.mark.parametrize("pixels", [PUBLISHED_PIXELS, DEFAULT_PIXELS], ids=["published", "transformers-default"])
def test_layout_counts_equal_real_processor(pixels, ckpt):
    """The processor AutoProcessor builds for llava_onevision1_5 at the published settings (and at transformers'
    defaults), around the tiny tokenizer and template: every size's image tokens are covered and its 28 px cells
    tile the image; the sizes reach the pixel floor and the cap."""
    from transformers import AutoTokenizer

    from vrh_lmms.model.tiny.llava_onevision1_5 import make_processor

    processor = make_processor(AutoTokenizer.from_pretrained(ckpt), **pixels)
    counts = [_count_and_tile(processor, Image.new("RGB", size, (90, 90, 90)), size) for size in SIZES]
    floor, cap = pixels["min_pixels"] // (28 * 28), pixels["max_pixels"] // (28 * 28)
    assert floor <= min(counts) <= floor * 1.1 and cap * 0.9 <= max(counts) <= cap, counts
    assert len(set(counts)) >= 10, counts


@pytest.mark.exact
def test_layout_counts_after_the_backends_own_resize(ckpt):
    """lmms-eval's backend resizes each image with qwen_vl_utils (28 px factor, its default bounds) before the
    processor (published bounds) sees it; the layout maps the grid back onto the original image."""
    from qwen_vl_utils import process_vision_info
    from transformers import AutoTokenizer

    from vrh_lmms.model.tiny.llava_onevision1_5 import make_processor

    processor = make_processor(AutoTokenizer.from_pretrained(ckpt), **PUBLISHED_PIXELS)
    counts = []
    for size in SIZES:
        item = {"type": "image", "image": Image.new("RGB", size, (90, 90, 90))}
        (resized,), _ = process_vision_info([[{"role": "user", "content": [item]}]])
        assert resized.size[0] % 28 == 0 and resized.size[1] % 28 == 0
        counts.append(_count_and_tile(processor, resized, size))
    assert len(set(counts)) >= 8 and min(counts) >= 256, counts  # 640x480 and 480x640 alike, and their mirrors


@pytest.mark.exact
@pytest.mark.parametrize("size", [(150, 90), (90, 200), (300, 60), (230, 220)])
def test_layout_by_perturbation(size, ckpt):
    """A rectangle drawn on a flat image changes exactly the predicted tokens' inputs to text layer 0 (vision
    attention zeroed, so each merged token carries only its own 2 x 2 patches; the class token aside)."""
    checks.check_layout_by_perturbation(ckpt, FAMILY, size)


# ------------------------------------------------------------------------------------------- boxes
def test_boxes_asked_and_read_in_the_generic_convention():
    """LLaVA-OneVision-1.5 documents no box output format: asked for 0-1000 `[x1, y1, x2, y2]` and read so."""
    conv = CONVENTIONS[get_family(FAMILY).box_convention]
    assert conv.name == get_family("gemma3").box_convention and "0-1000" in conv.prompt("the cat")
    assert conv.read_box("[250, 250, 750, 750]", (200, 100)).box == [50.0, 25.0, 150.0, 75.0]


# ------------------------------------------------------------------------------------------- answers
def test_tiny_answers_depend_on_image_and_heads(ckpt):
    """Six scenes, one prompt: at least four different answers; ablating two heads changes some answer."""
    checks.check_answers_depend_on_image_and_heads(ckpt, max_new_tokens=5)


@pytest.mark.parametrize("chat", [False, True], ids=["simple", "chat"])
def test_heads_none_answers_like_the_base_backend_and_plain_transformers(ckpt, chat):
    """The lmms-eval backend with only its class corrected, vrh_llava_onevision1_5 with heads=none and plain
    transformers greedy generation (the checkpoint's template with the backend's system prompt) answer alike."""
    from lmms_eval.models.chat.llava_onevision1_5 import Llava_OneVision1_5 as Chat
    from lmms_eval.models.simple.llava_onevision1_5 import Llava_OneVision1_5 as Simple

    from vrh_lmms.model_wrappers.llava_onevision1_5 import (
        VRHLlavaOneVision15,
        VRHLlavaOneVision15Chat,
        image_text_class,
    )

    base_cls, wrapper_cls = (Chat, VRHLlavaOneVision15Chat) if chat else (Simple, VRHLlavaOneVision15)
    docs = scene_docs(3)
    with image_text_class(ckpt):
        base = base_cls(pretrained=ckpt, device="cpu", device_map="cpu")
    expected = run(base, docs)
    got = run(wrapper_cls(pretrained=ckpt, heads="none"), docs)
    assert got == expected and len(set(expected)) > 1, expected
    assert expected == plain_greedy_answers(ckpt, docs)


def plain_greedy_answers(ckpt: str, docs) -> list[str]:
    """What the backend should answer, by plain transformers: the checkpoint's template over the backend's system
    prompt, one image item and the task text; the processor at the backend's pixel bounds; greedy generate (the
    backend's qwen_vl_utils resize leaves these 112 px scenes as they are)."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    model = AutoModelForImageTextToText.from_pretrained(ckpt).eval()
    processor = AutoProcessor.from_pretrained(ckpt, **PUBLISHED_PIXELS)
    out = []
    for doc in docs.values():
        question = {"type": "text", "text": f"Locate {doc['expression']} in the image."}
        messages = [{"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": [{"type": "image"}, question]}]
        prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        inputs = processor(text=[prompt], images=[doc["image"]], return_tensors="pt")
        with torch.no_grad():
            ids = model.generate(**inputs, max_new_tokens=6, do_sample=False)
        out.append(processor.tokenizer.decode(ids[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))
    return out


@pytest.mark.exact
@pytest.mark.parametrize("chat", [False, True], ids=["simple", "chat"])
def test_batch_of_three_answers_as_one_at_a_time(ckpt, chat):
    """The simple backend pads on the tokenizer's side (the tiny one, as Qwen2's, pads right), which made the
    shorter prompts of a batch generate after pad tokens; the wrapper pads left (float32, heads ablated)."""
    from vrh_lmms.model_wrappers.llava_onevision1_5 import VRHLlavaOneVision15, VRHLlavaOneVision15Chat

    cls = VRHLlavaOneVision15Chat if chat else VRHLlavaOneVision15
    docs = scene_docs(3)
    one = run(cls(pretrained=ckpt, heads=checks.HEADS, dtype="float32"), docs)
    batched = cls(pretrained=ckpt, heads=checks.HEADS, dtype="float32", batch_size=3)
    assert run(batched, docs) == one
    assert batched.processor.tokenizer.padding_side == "left"  # the chat backend's own, once it batches


@pytest.mark.exact
def test_ablated_logits_equal_eager_reference(ckpt):
    from vrh_lmms.model_wrappers.llava_onevision1_5 import VRHLlavaOneVision15

    checks.check_ablated_logits_equal_eager_reference(VRHLlavaOneVision15, ckpt)


def test_chat_backend_generate_failure_is_raised_not_an_empty_answer(ckpt, monkeypatch):
    """The chat backend logs a failed generate and answers ""; the wrapper raises once the batch is done."""
    from vrh_lmms.base.errors import VRHError
    from vrh_lmms.model_wrappers.llava_onevision1_5 import VRHLlavaOneVision15Chat

    lm = VRHLlavaOneVision15Chat(pretrained=ckpt, heads="none")

    def broken(*args, **kwargs):
        raise RuntimeError("out of memory (simulated)")

    monkeypatch.setattr(lm.model, "generate", broken)
    with pytest.raises(VRHError, match=r"generate failed on 2 of 2 requests: .*out of memory \(simulated\)"):
        run(lm, scene_docs(2))


def test_discovery_end_to_end(ckpt, tmp_path, monkeypatch):
    """vrh_synth_grounding through lmms-eval's evaluator and vrh_llava_onevision1_5 (chat): a complete heads file,
    box tokens found among the image tokens, mass on the box never above the mass on the image (~2 s)."""
    checks.check_discovery_end_to_end("vrh_llava_onevision1_5", FAMILY, ckpt, tmp_path, monkeypatch)


def test_python_api_loads_it_through_its_family(ckpt):
    import vrh_lmms as vrh

    model = vrh.load(ckpt, dtype="float32")
    assert model.name == "vrh_llava_onevision1_5"
    assert type(model.hf).__name__ == "LlavaOnevision15ForConditionalGeneration"
