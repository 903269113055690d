"""MiniCPM-V 4.6 and 4.7: `vrh_minicpmv` (our backend: lmms-eval's `minicpm_v` answers through the remote code's
`chat`, which a transformers-native checkpoint lacks), tiny MiniCPMV4_6 / MiniCPMV4_7ForConditionalGeneration that
answer per image and per head set, the image-token layout against MiniCPMV4_6Processor / MiniCPMV4_7Processor at
MiniCPM-V-4.6's settings, the box format read in its convention, and discovery end to end; every check runs on both
versions.

- heads=none answers equal plain transformers greedy generation on the backend's prompt;
- ablated logits (on the exact inputs the backend passed to generate) equal the independent reference: eager
  attention with the heads' outputs zeroed;
- the layout accounts for exactly the image tokens the real processor writes at the published settings on 12 sizes
  (source view alone, 2 to 10 views), agrees with its `target_sizes`, and the token -> cell mapping is checked by
  experiment on the tiny model.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from support import family_checks as checks

from vrh_lmms.base.boxes.known import CONVENTIONS
from vrh_lmms.base.families import get_family
from vrh_lmms.model.capture.extras import layout_extras
from vrh_lmms.model.capture.layouts import image_token_map
from vrh_lmms.model.tiny.inputs import render_prompt, scene_messages

torch.set_num_threads(1)

FAMILY = "minicpmv"


@pytest.fixture(scope="module", params=["4.6", "4.7"])
def version(request):
    return request.param


@pytest.fixture(scope="module")
def ckpt(version, tiny_checkpoints, tmp_path_factory):
    """The registered tiny MiniCPM-V 4.6, and a 4.7 (its forward groups each image's views by marker ids)."""
    if version == "4.6":
        return str(tiny_checkpoints(FAMILY))
    from vrh_lmms.model.tiny.minicpmv import build

    return str(build(tmp_path_factory.mktemp("tiny_minicpmv47"), seed=0, version="4.7"))


def test_wrapper_registered_with_its_family():
    from vrh_lmms.model_wrappers.manifests import WRAPPERS
    from vrh_lmms.model_wrappers.minicpmv import VRHMiniCPMV

    assert VRHMiniCPMV.vrh_model_id() == "vrh_minicpmv" and "VRHMiniCPMV" in WRAPPERS["vrh_minicpmv"][1:]
    fam = get_family(FAMILY)
    assert fam.box_convention == "minicpmv" and "minicpmv" in CONVENTIONS and fam.layout == "minicpmv"
    assert fam.model_types == ("minicpmv4_6", "minicpmv4_7")  # both run by every test below (the ckpt fixture)


def test_heads_none_answers_like_plain_transformers(ckpt):
    """The backend's prompt (chat template: the image, then the task text), greedy generate, special tokens
    skipped; a left-padded batch answers as one prompt at a time."""
    from vrh_lmms.model_wrappers.minicpmv import VRHMiniCPMV

    checks.check_heads_none_answers_like_plain_transformers(VRHMiniCPMV, ckpt)


@pytest.mark.exact
def test_ablated_logits_equal_eager_reference(ckpt):
    from vrh_lmms.model_wrappers.minicpmv import VRHMiniCPMV

    checks.check_ablated_logits_equal_eager_reference(VRHMiniCPMV, ckpt)


def test_tiny_answers_depend_on_image_and_heads(ckpt):
    """Six scenes, one prompt: at least four different answers; ablating two heads changes some answer."""
    checks.check_answers_depend_on_image_and_heads(ckpt)


# ------------------------------------------------------------------------------------- layout vs processor
SIZES = [(640, 480), (480, 640), (97, 131), (1000, 250), (250, 1000), (30, 30), (333, 334), (1200, 90),
         (90, 700), (2000, 1500), (2400, 1200), (4000, 500)]


@pytest.mark.exact
def test_layout_counts_equal_real_processor(ckpt, version):
    """MiniCPM-V-4.6's processor (scale_resolution 448, patch 14, at most 9 slices, 16x downsampling) around the tiny
    tokenizer: every size's image tokens are covered, each view's grid is the processor's `target_sizes` / 16, each
    view's cells tile the image, and the sizes reach the source view alone and 2 to 10 views."""
    from transformers import AutoTokenizer, MiniCPMV4_6Processor, MiniCPMV4_7Processor

    from vrh_lmms.model.tiny.minicpmv import minicpmv_processor

    cls = MiniCPMV4_7Processor if version == "4.7" else MiniCPMV4_6Processor
    processor = minicpmv_processor(AutoTokenizer.from_pretrained(ckpt), scale=448, patch=14, processor_cls=cls)
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
    checks.check_layout_by_perturbation(ckpt, FAMILY, size)


# ------------------------------------------------------------------------------------------- points, discovery
def test_boxes_read_in_minicpmv_convention():
    """MiniCPM-V answers `<ref>expr</ref><box>x1 y1 x2 y2</box>`, spaces between, per mille of the image."""
    conv = CONVENTIONS["minicpmv"]
    assert "<box>x1 y1 x2 y2</box>" in conv.prompt("the cat")
    box = conv.read_box("<ref>the cat</ref><box>250 250 750 750</box>", (200, 100))
    assert box.box == [50.0, 25.0, 150.0, 75.0] and box.n_boxes == 1
    assert conv.read_box("[250, 500, 750, 1000]", (200, 100)).box == [50.0, 50.0, 150.0, 100.0]
    assert conv.read_points("<box>0 0 500 500</box>", (100, 100)).points == [[25.0, 25.0]]


def test_hybrid_text_of_the_published_checkpoints_has_heads_in_its_full_attention_layers():
    """MiniCPM-V 4.6 / 4.7 ship Qwen3.5 text (linear-attention layers, a full-attention layer every fourth): the
    decoder locator finds heads in the full-attention layers only, each keeping its decoder layer's index."""
    from transformers import MiniCPMV4_6Config, MiniCPMV4_6ForConditionalGeneration

    from vrh_lmms.base.errors import VRHError
    from vrh_lmms.base.heads.geometry import HeadRef
    from vrh_lmms.model.backbone import locate_decoder
    from vrh_lmms.model.tiny.minicpmv import TEXT, VISION, minicpmv_tokenizer

    n = len(minicpmv_tokenizer())
    text = {**TEXT, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "num_hidden_layers": 4, "intermediate_size": 64, "vocab_size": n, "model_type": "qwen3_5_text",
            "layer_types": ["linear_attention"] * 3 + ["full_attention"]}
    with torch.device("meta"):
        model = MiniCPMV4_6ForConditionalGeneration(MiniCPMV4_6Config(text_config=text, vision_config=VISION,
                                                                      insert_layer_id=0))
    dec = locate_decoder(model)
    g = dec.geometry
    assert (g.layers, g.head_layers, g.all_heads()[0]) == (4, (3,), HeadRef(3, 0))
    assert dec.out_projs[:3] == [None] * 3 and dec.out_projs[3] is model.model.language_model.layers[3].self_attn.o_proj
    with pytest.raises(VRHError, match=r"L0H1 is in a layer without attention heads .*heads exist in L3$"):
        g.check(HeadRef(0, 1))


def test_wrapper_ablates_a_hybrid_checkpoint_and_refuses_a_linear_layers_head_before_the_load(tmp_path,
                                                                                              monkeypatch):
    """vrh_minicpmv on a hybrid text decoder: heads in its full-attention layer ablate exactly (an independent
    pre-hook on the module path), a head in a linear-attention layer is refused from the config in one line naming
    the layers with heads, before any weight loads."""
    from transformers import AutoModelForImageTextToText

    from vrh_lmms.base.errors import VRHError
    from vrh_lmms.model.tiny.minicpmv import build
    from vrh_lmms.model_wrappers.minicpmv import VRHMiniCPMV

    path = build(tmp_path / "hybrid", text={"num_hidden_layers": 2, "layer_types": ["linear_attention",
                                                                                     "full_attention"]})
    lm = VRHMiniCPMV(pretrained=str(path), heads="L1H0", dtype="float32")
    g = lm.vrh_decoder.geometry
    assert g.head_layers == (1,) and lm.vrh_record()["ablation"]["heads"] == ["L1H0"]
    ids = torch.tensor([[5, 17, 33, 48, 61, 77, 90, 104]])
    proj = lm.model.get_submodule("model.language_model.layers.1.self_attn.o_proj")
    width = proj.weight.shape[1] // 4
    with torch.no_grad():
        ours = lm.model(input_ids=ids).logits
        lm.vrh_apply(_none(lm))
        intact = lm.model(input_ids=ids).logits
        handle = proj.register_forward_pre_hook(
            lambda _m, args: (torch.cat([torch.zeros_like(args[0][..., :width]), args[0][..., width:]], -1),))
        reference = lm.model(input_ids=ids).logits
        handle.remove()
    assert torch.equal(ours, reference) and not torch.equal(ours, intact)

    def no_load(*args, **kwargs):
        raise AssertionError("weights loaded before the refusal")

    monkeypatch.setattr(AutoModelForImageTextToText, "from_pretrained", no_load)
    with pytest.raises(VRHError, match=r"heads=L0H1: head L0H1 is in a layer without attention heads \(a "
                                       r"linear-attention layer of this hybrid decoder\); heads exist in L1") as err:
        VRHMiniCPMV(pretrained=str(path), heads="L0H1")
    assert "\n" not in str(err.value)


def _none(lm):
    from vrh_lmms.base.heads.spec import resolve_spec

    return resolve_spec(None, lm.vrh_decoder.geometry)


@pytest.mark.slow
def test_discovery_end_to_end(ckpt, tmp_path, monkeypatch):
    """vrh_synth_grounding through lmms-eval's evaluator and vrh_minicpmv: a complete heads file, box tokens found
    among the image tokens, mass on the box never above the mass on the image."""
    checks.check_discovery_end_to_end("vrh_minicpmv", FAMILY, ckpt, tmp_path, monkeypatch)


@pytest.mark.slow
def test_discovery_on_a_hybrid_decoder_names_real_layers(tmp_path, monkeypatch):
    """Discovery end to end on a hybrid text decoder (linear attention in L0 and L2): the heads file's geometry says
    which layers have heads, and its rankings name only them, by their decoder layer index; the head means (for mean
    ablation) are zeros in the layers without heads."""
    from vrh_lmms.model.ablation import load_means, means_path_for
    from vrh_lmms.model.tiny.minicpmv import build

    path = build(tmp_path / "hybrid", text={"num_hidden_layers": 4, "layer_types": ["linear_attention",
                                                                                     "full_attention"] * 2})
    hf = checks.check_discovery_end_to_end("vrh_minicpmv", FAMILY, str(path), tmp_path, monkeypatch)
    assert hf.geometry.head_layers == (1, 3)
    assert len(hf.ranking) == 2 * hf.geometry.heads and {h.layer for h in hf.ranking} == {1, 3}
    for cell in hf.cells.values():
        assert {int(h[1:].split("H")[0]) for h in cell["ranking"]} == {1, 3}
    assert not np.asarray(hf.scores)[[0, 2]].any()
    means = load_means(means_path_for(hf.path))
    assert not means[[0, 2]].any() and means[[1, 3]].abs().sum() > 0
