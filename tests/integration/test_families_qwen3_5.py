"""Qwen3.5, dense and MoE: `vrh_qwen3_5` over lmms-eval's `qwen3_5` backend (class chosen from the config), tiny
Qwen3_5 / Qwen3_5MoeForConditionalGeneration with a hybrid decoder (Gated DeltaNet layers 0 and 2, full attention in
1 and 3) that answer per image and per head set, the image-token layout against the real processor at the published
settings, the box format read in its convention, and discovery end to end; every model check runs on both kinds.

- heads=none answers equal the unwrapped lmms-eval backend's;
- ablated logits (on the exact inputs the backend passed to generate) equal the independent reference: eager
  attention with the heads' outputs zeroed; heads keep their decoder layer index (L1, L3), and a head of a
  linear-attention layer is refused in one line;
- the layout accounts for exactly the image tokens the real processor writes at Qwen3.5's published settings (and
  after the backend's own resize) on 12 sizes, and the token -> cell mapping is checked by experiment.
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

FAMILY = "qwen3_5"
HEADS = "L1H1;L3H0"  # full-attention layers of the tiny decoder (0 and 2 are linear attention)
NO_THINKING = {"enable_thinking": False}  # the backend's default opens a <think> block it strips the answer of


@pytest.fixture(scope="module", params=["dense", "moe"])
def kind(request):
    return request.param


@pytest.fixture(scope="module")
def ckpt(kind, tiny_checkpoints, tmp_path_factory):
    """The registered tiny Qwen3.5, and a tiny Qwen3.5-MoE (every MLP routed experts plus the shared one) in a
    folder named as the hub names MoE checkpoints (`A<n>B`), which the unwrapped backend needs to load it."""
    if kind == "dense":
        return str(tiny_checkpoints(FAMILY))
    from vrh_lmms.model.tiny.qwen3_5 import build_moe

    return str(build_moe(tmp_path_factory.mktemp("tiny") / "Qwen3.5-tiny-A1B", seed=0))


def test_wrapper_registered_over_its_backend():
    from lmms_eval.models.chat.qwen3_5 import Qwen3_5 as Chat
    from lmms_eval.models.simple.qwen3_5 import Qwen3_5 as Simple

    from vrh_lmms.model_wrappers.manifests import WRAPPERS
    from vrh_lmms.model_wrappers.qwen3_5 import VRHQwen3_5, VRHQwen3_5Chat

    assert WRAPPERS["vrh_qwen3_5"][1:] == ("VRHQwen3_5", "VRHQwen3_5Chat")
    assert issubclass(VRHQwen3_5, Simple) and issubclass(VRHQwen3_5Chat, Chat) and not VRHQwen3_5Chat.is_simple
    fam = get_family(FAMILY)
    assert fam.model_types == ("qwen3_5", "qwen3_5_moe") and fam.layout == "qwen3_vl"
    assert fam.box_convention == "qwen3_vl"


def test_tiny_checkpoints_are_hybrid_and_moe(ckpt, kind):
    """What the checks below run through is really there: linear-attention layers without softmax heads before and
    between the full-attention ones, and routed experts in the MoE text."""
    from vrh_lmms.model.tiny.inputs import load_tiny

    model, _ = load_tiny(ckpt)
    text = model.config.text_config
    assert model.config.model_type == ("qwen3_5_moe" if kind == "moe" else "qwen3_5")
    assert text.layer_types == ["linear_attention", "full_attention"] * 2
    layers = model.model.language_model.layers
    assert [hasattr(layer, "self_attn") for layer in layers] == [False, True, False, True]
    assert [hasattr(layer, "linear_attn") for layer in layers] == [True, False, True, False]
    assert all(hasattr(layer.mlp, "experts") == (kind == "moe") for layer in layers)


def test_moe_checkpoint_loads_its_own_class_whatever_its_name(ckpt, kind, monkeypatch):
    """lmms-eval's backend picks the MoE class only when the name contains `A<n>B`; the wrapper reads the config.
    The model is not located: only the class the backend loaded is checked."""
    import lmms_eval.models.simple.qwen3_vl as backend_module
    from transformers import Qwen3_5ForConditionalGeneration, Qwen3_5MoeForConditionalGeneration

    from vrh_lmms.model_wrappers.qwen3_5 import qwen3_5_class_from_config

    expected = Qwen3_5MoeForConditionalGeneration if kind == "moe" else Qwen3_5ForConditionalGeneration
    # the fault: the class follows the name (this folder says A1B for the MoE checkpoint), not the config
    assert backend_module._resolve_model_class(ckpt, False)[0] is Qwen3_5ForConditionalGeneration
    with qwen3_5_class_from_config(ckpt):
        assert backend_module._resolve_model_class(ckpt, False)[0] is expected
        assert backend_module._resolve_model_class(ckpt, True)[0] is expected
    assert backend_module._resolve_model_class(ckpt, True)[0] is Qwen3_5MoeForConditionalGeneration  # restored


# ------------------------------------------------------------------------------------- layout vs processor
SIZES = [(640, 480), (480, 640), (97, 131), (1000, 250), (250, 1000), (30, 30), (333, 334), (1200, 90),
         (90, 700), (2000, 1500), (4000, 500), (3000, 3000)]
# Qwen/Qwen3.5-*'s preprocessor_config.json: Qwen2VLImageProcessor, 16 px patches merged 2 x 2, 2 frames per
# temporal patch, between 65,536 and 16,777,216 pixels (Qwen3-VL's settings)
PUBLISHED_PIXELS = {"min_pixels": 64 * 32 * 32, "max_pixels": 16384 * 32 * 32}


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
    assert len(tmap.positions) == int((batch["input_ids"][0] == image_id).sum()) == t * gh * gw // 4
    cells = tmap.cells
    assert (cells[:, 0] >= 0).all() and (cells[:, 2] <= w + 1e-3).all()
    assert (cells[:, 1] >= 0).all() and (cells[:, 3] <= h + 1e-3).all()
    area = float(((cells[:, 2] - cells[:, 0]) * (cells[:, 3] - cells[:, 1])).sum())
    assert math.isclose(area, w * h, rel_tol=1e-4), (size, area)
    return len(tmap.positions)


@pytest.mark.exact
def test_layout_counts_equal_real_processor_at_published_settings(tiny_checkpoints):
    """Qwen3VLProcessor with Qwen2VLImageProcessor at Qwen3.5's published settings, around the tiny tokenizer and
    Qwen3.5's template: every size's image tokens are covered and its 32 px cells tile the image; the sizes reach
    the pixel floor (64 cells) and large images far above it."""
    from transformers import AutoTokenizer

    from vrh_lmms.model.tiny.qwen3_5 import qwen3_5_processor

    processor = qwen3_5_processor(AutoTokenizer.from_pretrained(tiny_checkpoints(FAMILY)), **PUBLISHED_PIXELS)
    counts = [_count_and_tile(processor, Image.new("RGB", size, (90, 90, 90)), size) for size in SIZES]
    assert min(counts) == 64 and max(counts) > 5000 and len(set(counts)) >= 10, counts


@pytest.mark.exact
def test_layout_counts_equal_the_backends_own_resize(tiny_checkpoints):
    """lmms-eval's qwen3_5 backend resizes each image itself (qwen_vl_utils, 32 px factor, its default 64-128 cells)
    and calls the processor with do_resize=False; the layout maps the resized grid back onto the original image."""
    from qwen_vl_utils import process_vision_info
    from transformers import AutoTokenizer

    from vrh_lmms.model.tiny.qwen3_5 import qwen3_5_processor

    processor = qwen3_5_processor(AutoTokenizer.from_pretrained(tiny_checkpoints(FAMILY)), **PUBLISHED_PIXELS)
    counts = []
    for size in SIZES:
        item = {"type": "image", "image": Image.new("RGB", size, (90, 90, 90)), "min_pixels": 64 * 32 * 32,
                "max_pixels": 128 * 32 * 32}
        (resized,), _ = process_vision_info([[{"role": "user", "content": [item]}]], image_patch_size=16)
        assert resized.size[0] % 32 == 0 and resized.size[1] % 32 == 0
        counts.append(_count_and_tile(processor, resized, size, do_resize=False))
    assert all(56 <= c <= 128 for c in counts) and len(set(counts)) >= 6, counts


# ------------------------------------------------------------------------------------------- boxes
def test_boxes_read_in_qwen3_convention():
    """Qwen3.5 answers Qwen3-VL's JSON `bbox_2d` on a 0-1000 grid of the image (whatever size the model saw)."""
    conv = CONVENTIONS[get_family(FAMILY).box_convention]
    assert conv.prompt("the cat") == "Locate the cat in the image and output its bbox coordinates in JSON format."
    box = conv.read_box('[{"bbox_2d": [250, 250, 750, 750], "label": "the cat"}]', (200, 100))
    assert box.box == [50.0, 25.0, 150.0, 75.0] and box.n_boxes == 1


# ------------------------------------------------------------------------------------------- answers
def test_tiny_answers_depend_on_image_and_heads(ckpt):
    """Six scenes, one prompt: at least four different answers; ablating two heads of the full-attention layers
    changes some answer."""
    checks.check_answers_depend_on_image_and_heads(ckpt, max_new_tokens=5, heads=HEADS)


@pytest.mark.parametrize("chat", [False, True], ids=["simple", "chat"])
def test_heads_none_answers_like_the_base_backend(ckpt, chat):
    """The unwrapped lmms-eval backend and vrh_qwen3_5 with heads=none answer alike (bfloat16, the backend's
    default), with thinking off and on (on: the backend strips the answer up to `</think>`)."""
    from lmms_eval.models.chat.qwen3_5 import Qwen3_5 as Chat
    from lmms_eval.models.simple.qwen3_5 import Qwen3_5 as Simple

    from vrh_lmms.model_wrappers.qwen3_5 import VRHQwen3_5, VRHQwen3_5Chat

    base_cls, wrapper_cls = (Chat, VRHQwen3_5Chat) if chat else (Simple, VRHQwen3_5)
    docs = scene_docs(3)
    for thinking in (False, True):
        expected = run(base_cls(pretrained=ckpt, device="cpu", device_map="cpu", enable_thinking=thinking), docs)
        got = run(wrapper_cls(pretrained=ckpt, heads="none", enable_thinking=thinking), docs)
        assert got == expected, (thinking, got, expected)
        assert thinking or len(set(expected)) > 1, expected


@pytest.mark.exact
def test_batch_of_three_left_padded_equals_one_at_a_time(ckpt):
    """The linear-attention layers' convolution and recurrent state see the left padding too (the tiny pad token has
    an embedding, as a trained one does): on the inputs the backend passed to generate, each sample's next-token
    logits in a left-padded batch of three equal its logits alone, and the answers agree (float32)."""
    from support.wrappers import model_inputs, recorded_generate

    from vrh_lmms.model_wrappers.qwen3_5 import VRHQwen3_5

    docs = scene_docs(3)
    lms, answers, calls = [], [], []
    for bs in (1, 3):
        lm = VRHQwen3_5(pretrained=ckpt, heads=HEADS, dtype="float32", batch_size=bs, **NO_THINKING)
        with recorded_generate(lm.model) as recorded:
            answers.append(run(lm, docs))
        lms.append(lm)
        calls.append([model_inputs(c) for c in recorded])
    assert answers[0] == answers[1] and len(calls[0]) == 3 and len(calls[1]) == 1
    batch = calls[1][0]
    assert (batch["attention_mask"] == 0).any(), "the batch must really be padded"
    with torch.no_grad():
        together = lms[1].model(**batch).logits[:, -1]
        for alone in calls[0]:
            ids = alone["input_ids"][0]
            (row,) = [r for r in range(3) if torch.equal(batch["input_ids"][r][batch["attention_mask"][r].bool()], ids)]
            torch.testing.assert_close(together[row], lms[0].model(**alone).logits[0, -1], rtol=1e-4, atol=1e-4)


@pytest.mark.exact
def test_ablated_logits_equal_eager_reference(ckpt):
    """Heads L1H1 and L3H0 (full-attention layers, under their decoder layer index) zeroed by the wrapper equal
    eager attention with those heads' outputs zeroed, Qwen3.5's output gate included."""
    from vrh_lmms.model_wrappers.qwen3_5 import VRHQwen3_5

    checks.check_ablated_logits_equal_eager_reference(VRHQwen3_5, ckpt, heads=HEADS, **NO_THINKING)


def test_head_in_a_linear_attention_layer_is_refused_in_one_line(ckpt):
    from vrh_lmms.base.errors import VRHError
    from vrh_lmms.model_wrappers.qwen3_5 import VRHQwen3_5

    with pytest.raises(VRHError, match=r"L2H0 is in a layer without attention heads .*heads exist in L1, L3$") as err:
        VRHQwen3_5(pretrained=ckpt, heads="L1H0;L2H0")
    assert "\n" not in str(err.value)


def test_chat_template_switches_thinking():
    """Qwen3.5's generation prompt opens a `<think>` block by default and closes an empty one when thinking is off
    (what the backend's `enable_thinking` model arg passes to the template)."""
    from vrh_lmms.model.tiny.qwen3_5 import qwen3_5_tokenizer

    tok = qwen3_5_tokenizer()
    msgs = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    on = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    off = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert on.endswith("<|im_start|>assistant\n<think>\n")
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


@pytest.mark.exact
@pytest.mark.parametrize("size", [(150, 90), (90, 200), (300, 60), (230, 220)])
def test_layout_by_perturbation(size, tiny_checkpoints):
    """A rectangle drawn on a flat image changes exactly the predicted tokens' inputs to text layer 0 (a
    linear-attention layer: its inputs are the embeddings all the same), vision attention zeroed."""
    checks.check_layout_by_perturbation(str(tiny_checkpoints(FAMILY)), FAMILY, size)


@pytest.mark.slow
def test_discovery_end_to_end(ckpt, tmp_path, monkeypatch):
    """vrh_synth_grounding through lmms-eval's evaluator and vrh_qwen3_5: a complete heads file whose geometry
    names the full-attention layers, box tokens found among the image tokens, mass on the box never above the mass
    on the image, scores only in the layers with heads (0 in the file's rows of the linear-attention layers) and
    rankings naming only those heads."""
    import numpy as np

    from vrh_lmms.base.heads.heads_file import load_heads_file

    checks.check_discovery_end_to_end("vrh_qwen3_5", FAMILY, ckpt, tmp_path, monkeypatch,
                                      extra_args=",enable_thinking=False")
    hf = load_heads_file(tmp_path / "heads.json")
    assert hf.geometry.head_layers == (1, 3)
    scores = np.asarray(hf.cells["out,sum,mean"]["scores"], dtype=float)  # layers x heads, the file's shape
    assert scores.shape == (4, 4) and (scores[[1, 3]] > 0).all() and (scores[[0, 2]] == 0).all(), scores
    assert len(hf.ranking) == 8 and {h.layer for h in hf.ranking} == {1, 3}
    assert {h.layer for h in hf.cell_ranking("out,sum,mean")} == {1, 3}


def test_python_api_loads_it_through_its_family(ckpt, kind):
    """`vrh.load(folder)` picks vrh_qwen3_5 from the config, with the class the config names, and its geometry
    lists the full-attention layers."""
    import vrh_lmms as vrh

    model = vrh.load(ckpt, dtype="float32", enable_thinking=False)
    assert model.name == "vrh_qwen3_5" and model.geometry.head_layers == (1, 3)
    assert type(model.hf).__name__ == ("Qwen3_5MoeForConditionalGeneration" if kind == "moe"
                                       else "Qwen3_5ForConditionalGeneration")
