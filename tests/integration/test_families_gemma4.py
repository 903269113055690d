"""Gemma 4: `vrh_gemma4` over lmms-eval's gemma4 backend, a tiny Gemma4ForConditionalGeneration that answers per
image and per head set, the image-token layout against Gemma4Processor at the published checkpoints' settings, and
discovery end to end.

- heads=none answers equal the unwrapped lmms-eval backend's;
- ablated logits (on the exact inputs the backend passed to generate) equal the independent reference (eager
  attention with the heads' outputs zeroed), with a head cut in a sliding layer (16 wide, 2 KV heads, bidirectional
  inside the image, a window shorter than the prompt) and one in a global layer (32 wide, one KV head whose keys are
  its values);
- the layout accounts for exactly the soft tokens the real processor writes at the published settings (patch 16,
  3 x 3 pooling, 280 soft tokens; the other budgets too) on 12 sizes, agrees with the processor's patch positions,
  and the token -> cell mapping is checked by experiment on the tiny model.
"""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest
import torch
from PIL import Image
from support import family_checks as checks
from support.wrappers import run, scene_docs

from vrh_lmms.base.boxes.known import CONVENTIONS
from vrh_lmms.base.families import get_family
from vrh_lmms.model.capture.extras import layout_extras
from vrh_lmms.model.capture.layouts import image_token_map
from vrh_lmms.model.tiny.inputs import as_float32, load_tiny, processor_inputs, render_prompt, scene_messages

torch.set_num_threads(1)

FAMILY = "gemma4"


@pytest.fixture(scope="module", params=["gemma4", "gemma4_unified"])
def version(request):
    return request.param


@pytest.fixture(scope="module")
def ckpt(version, tiny_checkpoints, tmp_path_factory):
    """The registered tiny Gemma 4, and an encoder-free gemma4_unified (gemma-4-12B's architecture)."""
    if version == "gemma4":
        return str(tiny_checkpoints(FAMILY))
    from vrh_lmms.model.tiny.gemma4 import build

    return str(build(tmp_path_factory.mktemp("tiny_gemma4_unified"), seed=0, unified=True))


@pytest.fixture(scope="module")
def ckpt4(tiny_checkpoints):
    """Gemma 4 alone, for what the unified architecture shares with it (the backend, the text decoder)."""
    return str(tiny_checkpoints(FAMILY))


def _wrapper():
    from vrh_lmms.model_wrappers.gemma4 import VRHGemma4

    return VRHGemma4


def _backend():
    from lmms_eval.models.simple.gemma4 import Gemma4

    return Gemma4


def test_wrapper_registered_over_its_backend():
    from vrh_lmms.model_wrappers.manifests import WRAPPERS

    cls = _wrapper()
    assert cls.vrh_model_id() == "vrh_gemma4" and "VRHGemma4" in WRAPPERS["vrh_gemma4"][1:]
    assert issubclass(cls, _backend()) and cls.is_simple == _backend().is_simple
    fam = get_family(FAMILY)
    assert fam.model_types == ("gemma4", "gemma4_unified") and fam.layout == "gemma4"  # both run below (ckpt)
    assert fam.box_convention in CONVENTIONS


def test_python_api_loads_it_through_vrh_gemma4(ckpt4):
    """`vrh.load(<folder>)` picks the family's wrapper from config.json, with the per-layer head widths, which
    config.json alone gives too."""
    import vrh_lmms as vrh
    from vrh_lmms.harness.preload import config_geometry, load_config

    model = vrh.load(ckpt4, dtype="float32")
    assert type(model.lm).__name__ == "VRHGemma4"
    assert model.geometry.layer_head_dims == (16, 32) and model.geometry.layer_kv_heads == (2, 1)
    # what the checks before any weight loads read from config.json alone
    assert config_geometry(load_config(ckpt4), get_family(FAMILY)) == model.geometry


def test_heads_none_answers_like_the_base_backend(ckpt):
    docs = scene_docs(3)
    expected = run(_backend()(pretrained=ckpt, device="cpu", device_map="cpu"), docs)
    got = run(_wrapper()(pretrained=ckpt, heads="none"), docs)
    assert got == expected and len(set(expected)) > 1, expected


def test_batch_of_two_left_padded_equals_batch_of_one(ckpt):
    """The backend batches (left padding to a multiple of 8): each sample answers as alone, also with the
    bidirectional image blocks and the sliding window under the padding."""
    from support.wrappers import assert_batch_two_equals_one

    assert_batch_two_equals_one(lambda bs: _wrapper()(pretrained=ckpt, heads=checks.HEADS, dtype="float32",
                                                      batch_size=bs), scene_docs(3))


def test_pads_left_whatever_the_tokenizer_says(ckpt4, tmp_path):
    """lmms-eval's gemma4 pads each request to a multiple of 8, and loads the processor with padding_side="left"
    (unlike its gemma3, which keeps the tokenizer's side): a right-padding tokenizer changes no answer, with or
    without the wrapper, and the pads are on the left."""
    from support.wrappers import recorded_generate

    right = tmp_path / "right"
    shutil.copytree(ckpt4, right)
    config = json.loads((right / "tokenizer_config.json").read_text())
    (right / "tokenizer_config.json").write_text(json.dumps({**config, "padding_side": "right"}))
    docs = scene_docs(3)
    expected = run(_wrapper()(pretrained=ckpt4), docs)
    base = _backend()(pretrained=str(right), device="cpu", device_map="cpu")
    with recorded_generate(base.model) as calls:
        assert run(base, docs) == expected
    assert all(c["input_ids"].shape[1] % 8 == 0 and c["attention_mask"][:, -1].all() for c in calls)
    assert any(not c["attention_mask"][:, 0].all() for c in calls)
    assert run(_wrapper()(pretrained=str(right)), docs) == expected


@pytest.mark.exact
def test_ablated_logits_equal_eager_reference(ckpt):
    """L0H1 (sliding layer) and L1H0 (global layer, twice as wide): the wrapper's ablated logits on the backend's
    own inputs equal eager attention with those heads' outputs zeroed."""
    inputs = checks.check_ablated_logits_equal_eager_reference(_wrapper(), ckpt)
    assert "mm_token_type_ids" in inputs  # the bidirectional image blocks were in force


@pytest.mark.exact
def test_small_checkpoint_shape_ablates_exactly(tmp_path):
    """gemma-4-E2B / E4B's shape: per-layer input embeddings, causal images, no k=v, and the last layers reusing an
    earlier layer's keys and values (they keep their own queries and o_proj, so their heads are cut like any other):
    heads in a sharing sliding layer and a sharing global layer ablate as the eager reference."""
    from vrh_lmms.model.tiny.gemma4 import build

    path = build(tmp_path / "e2b", text={"num_hidden_layers": 4, "layer_types": ["sliding_attention",
                                                                                  "full_attention"] * 2,
                                         "num_kv_shared_layers": 2, "hidden_size_per_layer_input": 8,
                                         "attention_k_eq_v": False, "num_global_key_value_heads": None,
                                         "use_bidirectional_attention": None})
    from transformers import AutoConfig

    text = AutoConfig.from_pretrained(path).text_config
    assert text.kv_sharing_modes == ["store", "store", "reuse", "reuse"]
    assert [text.per_layer_config[i].head_dim for i in range(4)] == [16, 32, 16, 32]
    checks.check_ablated_logits_equal_eager_reference(_wrapper(), str(path), heads="L2H1;L3H0")


def test_packed_head_sets_answer_as_each_alone(ckpt4):
    """A packed sweep's head sets (none; a head of each layer kind; one global head) served from shared generate
    calls answer as each set applied alone."""
    from vrh_lmms.base.heads import HeadRef
    from vrh_lmms.base.heads.spec import HeadSet

    lm = _wrapper()(pretrained=ckpt4, dtype="float32")
    assert lm.vrh_pack_unsupported() is None
    docs = scene_docs(3)
    sets = [HeadSet(heads=(), spec="none", kind="explicit", k=0),
            HeadSet(heads=(HeadRef(0, 1), HeadRef(1, 0)), spec="L0H1;L1H0", kind="explicit", k=2),
            HeadSet(heads=(HeadRef(1, 3),), spec="L1H3", kind="explicit", k=1)]
    alone = []
    for hs in sets:
        lm.vrh_apply(hs)
        alone.append(run(lm, docs))
    lm.vrh_apply(sets[0])
    lm.vrh_pack(sets, ["zero"] * 3)
    packed = []
    for i in range(3):
        lm.vrh_serve(i)
        packed.append(run(lm, docs))
    lm.vrh_unpack()
    assert packed == alone and len({tuple(a) for a in alone}) == 3, alone


def test_tiny_answers_depend_on_image_and_heads(ckpt):
    """Six scenes, one prompt: at least four different answers; ablating two heads changes some answer."""
    checks.check_answers_depend_on_image_and_heads(ckpt, max_new_tokens=5, prepare=as_float32)


def test_tiny_keeps_the_published_attention_shapes(ckpt4):
    """What the ablation, capture and batch checks run through is really there: a sliding layer whose window is
    shorter than a prompt and whose image blocks are bidirectional (dropping mm_token_type_ids changes the logits),
    and a global layer with wider heads and fewer KV heads whose keys are the values."""
    model, processor = load_tiny(ckpt4)
    text = model.config.text_config
    batch = processor_inputs(processor, n=1)
    assert text.layer_types == ["sliding_attention", "full_attention"]
    assert text.sliding_window < batch["input_ids"].shape[1] and text.use_bidirectional_attention == "vision"
    sliding, full = (layer.self_attn for layer in model.model.language_model.layers)
    assert (sliding.head_dim, full.head_dim) == (16, 32)
    assert (sliding.k_proj.out_features // 16, full.k_proj.out_features // 32) == (2, 1)
    assert sliding.v_proj is not None and full.v_proj is None  # attention_k_eq_v on the global layer
    assert (sliding.o_proj.in_features, full.o_proj.in_features) == (64, 128)
    with torch.no_grad():
        both = model(**batch).logits
        causal = model(**{k: v for k, v in batch.items() if k != "mm_token_type_ids"}).logits
    assert (both - causal).abs().max() > 1e-3


# ------------------------------------------------------------------------------------- layout vs processor
SIZES = [(640, 480), (480, 640), (97, 131), (1000, 250), (250, 1000), (30, 30), (333, 334), (1200, 90),
         (90, 700), (2000, 1500), (6000, 20), (10, 4000)]


def _published(ckpt: str, max_soft_tokens: int = 280, unified: bool = False):
    """Gemma4Processor (Gemma4UnifiedProcessor) at the gemma-4 checkpoints' settings (patch 16, pooling 3) around
    the tiny tokenizer."""
    from transformers import AutoTokenizer

    from vrh_lmms.model.tiny.gemma4 import gemma4_processor

    return gemma4_processor(AutoTokenizer.from_pretrained(ckpt), max_soft_tokens=max_soft_tokens, patch=16, pool=3,
                            unified=unified)


@pytest.mark.exact
@pytest.mark.parametrize("budget", [280, 70, 1120])
def test_layout_counts_equal_real_processor(ckpt, version, budget):
    """Every size's soft tokens are covered by one rows x cols grid tiling the image, whose shape is the one the
    processor's patch positions span (cols = (max x + 1) / 3, rows = (max y + 1) / 3; the unified processor gives
    the merged cells' positions); sizes reach both sides rounded to 0 cells (the thin-image branch) and upscaled
    small images."""
    unified = version == "gemma4_unified"
    processor = _published(ckpt, budget, unified)
    k = 1 if unified else 3
    shapes = set()
    for w, h in SIZES if budget == 280 else SIZES[:8]:
        image = Image.new("RGB", (w, h), (90, 90, 90))
        batch = processor(text=[render_prompt(processor, scene_messages("it", image))], images=[image],
                          return_tensors="pt")
        extras = layout_extras(FAMILY, processor, batch, 0)
        assert extras["max_soft_tokens"] == budget
        tmap = image_token_map(FAMILY, batch["input_ids"][0], (w, h), extras)  # raises unless the counts agree
        pos = batch["image_position_ids"][0]
        pos = pos[pos[:, 0] >= 0]
        cols, rows = (int(pos[:, 0].max()) + 1) // k, (int(pos[:, 1].max()) + 1) // k
        cells = tmap.cells
        n_soft = processor.image_processor(image)["num_soft_tokens_per_image"][0]
        assert len(tmap.positions) == rows * cols == int(n_soft) <= budget
        assert len(tmap.no_cell) == 0 and set(tmap.view) == {"image"}
        assert torch.allclose(cells[:cols, 0], torch.arange(cols) * w / cols)  # first row: left to right
        assert torch.allclose(cells[::cols, 1], torch.arange(rows) * h / rows)  # first column: top to bottom
        assert float(((cells[:, 2] - cells[:, 0]) * (cells[:, 3] - cells[:, 1])).sum()) == pytest.approx(w * h)
        shapes.add((rows, cols))
    assert len(shapes) >= 6 and (budget != 280 or {1} & {r for r, _ in shapes} and {1} & {c for _, c in shapes})


def test_layout_follows_the_backends_soft_token_budget(ckpt4):
    """lmms-eval's gemma4 passes `max_soft_tokens` (280 unless the model arg says otherwise) with every processor
    call, over the processor's own setting (70 in the tiny checkpoint): the layout reads the backend's."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(ckpt4)
    image = Image.new("RGB", (640, 480), (90, 90, 90))
    batch = processor(text=[render_prompt(processor, scene_messages("it", image))], images=[image],
                      return_tensors="pt", images_kwargs={"max_soft_tokens": 280})
    extras = layout_extras(FAMILY, processor, batch, 0, backend=SimpleNamespace(max_soft_tokens=280))
    assert extras["max_soft_tokens"] == 280 and processor.image_processor.max_soft_tokens == 70
    assert len(image_token_map(FAMILY, batch["input_ids"][0], (640, 480), extras).positions) > 70
    from vrh_lmms.base.errors import VRHError

    with pytest.raises(VRHError, match=r"^Gemma 4 input has \d+ image tokens; a 640 x 480 image .* 70 soft tokens"):
        image_token_map(FAMILY, batch["input_ids"][0], (640, 480), layout_extras(FAMILY, processor, batch, 0))


@pytest.mark.exact
@pytest.mark.parametrize("size", [(150, 90), (90, 200), (300, 60), (230, 220), (100, 80)])
def test_layout_by_perturbation(size, ckpt, version):
    """A rectangle drawn on a flat image changes exactly the predicted tokens' inputs to text layer 0 (vision
    attention zeroed, so each soft token carries only its own 3 x 3 patches; the unified embedder has none)."""
    checks.check_layout_by_perturbation(ckpt, FAMILY, size, vision_attention=version == "gemma4")


def test_soft_token_budget_refused_in_one_line_before_loading(ckpt4, monkeypatch):
    """A `max_soft_tokens` the processor does not offer is one line naming the allowed ones, before any weight loads;
    an allowed one given as text (as a model_args string gives it) is taken."""
    from transformers import AutoModelForImageTextToText

    from vrh_lmms.base.errors import VRHError

    def no_load(*args, **kwargs):
        raise AssertionError("weights loaded before the refusal")

    with monkeypatch.context() as patch:
        patch.setattr(AutoModelForImageTextToText, "from_pretrained", no_load)
        with pytest.raises(VRHError, match=r"^model arg max_soft_tokens=300: use one of 70, 140, 280, 560, 1120 ") as e:
            _wrapper()(pretrained=ckpt4, max_soft_tokens=300)
    assert "\n" not in str(e.value)
    assert _wrapper()(pretrained=ckpt4, max_soft_tokens="140").max_soft_tokens == 140


# ------------------------------------------------------------------------------------------- boxes, discovery
def test_boxes_asked_and_read_in_the_generic_convention():
    """Gemma 4 documents no box output format: asked for 0-1000 `[x1, y1, x2, y2]` and read so (fractions
    accepted), as Gemma 3."""
    conv = CONVENTIONS[get_family(FAMILY).box_convention]
    assert conv.name == get_family("gemma3").box_convention and "0-1000" in conv.prompt("the cat")
    assert conv.read_box("[250, 250, 750, 750]", (200, 100)).box == [50.0, 25.0, 150.0, 75.0]


@pytest.mark.slow
def test_discovery_end_to_end(ckpt, tmp_path, monkeypatch):
    """vrh_synth_grounding through lmms-eval's evaluator and vrh_gemma4: a complete heads file whose geometry
    keeps both layers' head widths, box tokens found among the image tokens."""
    checks.check_discovery_end_to_end("vrh_gemma4", FAMILY, ckpt, tmp_path, monkeypatch)
