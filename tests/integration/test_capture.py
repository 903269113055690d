"""Row capture equals eager `output_attentions` on every family's tiny model; logits are untouched; state restored."""

from __future__ import annotations

import pytest
import torch
from oracles.intervention_refs import eager_attentions

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model.backbone import installed_rows_hooks, locate_decoder
from vrh_lmms.model.capture import CapturePlan, capture_attention
from vrh_lmms.model.tiny.inputs import load_tiny, processor_inputs
from vrh_lmms.model.tiny.registry import TINY_FACTORIES as TINY

# float-exact outcomes: CI runs these once more under ATEN_CPU_CAPABILITY=default (docs/contracts.md)
pytestmark = pytest.mark.exact

torch.set_num_threads(1)

CAPTURE_FAMILIES = ["qwen2_5_vl", "qwen3_vl", "internvl", "llava_next", "paligemma", "glm4v", "idefics3",
                    "qwen2_5_omni", "llava", "llava_onevision", "gemma3", "mistral3",
                    "llama4", "molmo2", "qwen3_5"]
CAPTURE_FAMILIES.append("gemma4")  # per-layer head widths (global layers twice as wide)
CAPTURE_FAMILIES.append("llava_onevision1_5")  # RICE-ViT tower (a class token per image), Qwen3 text


def need_tiny(family: str) -> None:
    if family not in TINY:
        pytest.skip(f"no tiny {family} checkpoint in vrh_lmms.model.tiny.registry yet")


def text_impl(model) -> str:
    return locate_decoder(model).text_config._attn_implementation


@pytest.fixture(scope="module", params=CAPTURE_FAMILIES)
def family_model(request, tiny_checkpoints):
    need_tiny(request.param)
    model, processor = load_tiny(tiny_checkpoints(request.param))
    batch = processor_inputs(processor, n=2)  # left-padded: the two prompts differ in length
    return request.param, model, batch


def random_plan(batch, n_rows: int = 6, seed: int = 0, image_token_id: int | None = None) -> CapturePlan:
    """Random query rows (the last row of sample 1 padded), a random key set and the image tokens."""
    ids = batch["input_ids"]
    b, t = ids.shape
    g = torch.Generator().manual_seed(seed)
    rows = torch.stack([torch.randperm(t, generator=g)[:n_rows] for _ in range(b)])
    rows[0, 0] = t - 1  # always one row at the end of the sequence, where all keys are visible
    rows[1, -1] = -1
    sets = {"random": torch.rand(b, t, generator=g) > 0.5}
    if image_token_id is not None:
        sets["image"] = ids == image_token_id
    return CapturePlan(query_positions=rows, key_sets=sets)


def assert_matches_eager(result, plan: CapturePlan, attn: torch.Tensor) -> None:
    for bi in range(plan.query_positions.shape[0]):
        for qi, pos in enumerate(plan.query_positions[bi].tolist()):
            if pos < 0:
                assert not result.row_mask[bi, qi]
                assert (result.argmax[bi, :, :, qi] == -1).all()
                assert all((m[bi, :, :, qi].nan_to_num(0.0) == 0).all() for m in result.mass.values())
                continue
            rows = attn[bi, :, :, pos, :]  # (layers, heads, T)
            live = ~rows.isnan().flatten(1).any(1)  # layers with heads (a hybrid decoder's others: NaN, not measured)
            assert live.any()
            rows = rows[live]
            for name, keys in plan.key_sets.items():
                ref = (rows * keys[bi].float()).sum(-1)
                torch.testing.assert_close(result.mass[name][bi, live, :, qi], ref, rtol=0, atol=1e-5)
                assert result.mass[name][bi, ~live, :, qi].isnan().all()
            # argmax: the same key, or (on near-ties) a key whose eager probability is the row maximum
            got = result.argmax[bi, live, :, qi]
            picked = torch.gather(rows, -1, got[..., None])[..., 0]
            assert (picked >= rows.amax(-1) - 1e-6).all()


def test_capture_matches_eager_and_keeps_logits(family_model):
    _, model, batch = family_model
    assert (batch["attention_mask"] == 0).any(), "the batch must be left-padded for this test to mean something"
    image_id = getattr(model.config, "image_token_id", None)
    plan = random_plan(batch, image_token_id=image_id)
    previous = text_impl(model)
    with torch.no_grad():
        plain = model(**batch).logits
        with capture_attention(model, plan) as handle:
            captured = model(**batch).logits
    assert text_impl(model) == previous
    torch.testing.assert_close(captured, plain, rtol=0, atol=0)
    result = handle.result()
    g = locate_decoder(model).geometry
    assert result.mass["random"].shape == (2, g.layers, g.heads, plan.query_positions.shape[1])
    assert result.mass["random"].dtype == torch.float32
    assert_matches_eager(result, plan, eager_attentions(model, batch))


def test_padding_is_not_ignored(family_model):
    """Rows of the padded sample put no mass on left-padding keys (the mask reached the capture)."""
    _, model, batch = family_model
    pads = batch["attention_mask"] == 0
    t = pads.shape[1]
    plan = CapturePlan(query_positions=torch.tensor([[t - 1], [t - 1]]), key_sets={"pad": pads})
    with torch.no_grad(), capture_attention(model, plan) as handle:
        model(**batch)
    mass = handle.result().mass["pad"]
    padded = int(pads.any(1).nonzero()[0])
    layers = list(locate_decoder(model).geometry.attention_layers)  # a hybrid decoder's others are NaN
    assert (mass[padded][layers] == 0).all()


def test_restored_after_exception_and_incomplete_refused(family_model):
    _, model, batch = family_model
    previous = text_impl(model)
    plan = random_plan(batch)
    with pytest.raises(RuntimeError, match="boom"), capture_attention(model, plan):
        raise RuntimeError("boom")
    assert text_impl(model) == previous
    assert not installed_rows_hooks()
    with capture_attention(model, plan) as handle:
        pass
    with pytest.raises(VRHError, match="incomplete"):
        handle.result()


def test_capture_twice_in_one_scope_refused(tiny_checkpoints):
    model, processor = load_tiny(tiny_checkpoints("qwen2_5_vl"))
    batch = processor_inputs(processor, n=2)
    with torch.no_grad(), capture_attention(model, random_plan(batch)):
        model(**batch)
        with pytest.raises(VRHError, match="twice"):
            model(**batch)
    assert text_impl(model) == "sdpa" and not installed_rows_hooks()


def test_plan_validation():
    with pytest.raises(VRHError, match="query_positions"):
        CapturePlan(query_positions=torch.zeros(3, dtype=torch.long), key_sets={})
    with pytest.raises(VRHError, match="bool"):
        CapturePlan(query_positions=torch.zeros(2, 1, dtype=torch.long), key_sets={"box": torch.zeros(2, 5)})
    with pytest.raises(VRHError, match="disagree"):
        CapturePlan(query_positions=torch.zeros(1, 1, dtype=torch.long),
                    key_sets={"a": torch.zeros(1, 5, dtype=torch.bool), "b": torch.zeros(1, 6, dtype=torch.bool)})


def test_sequence_length_mismatch_refused(tiny_checkpoints):
    model, processor = load_tiny(tiny_checkpoints("qwen2_5_vl"))
    batch = processor_inputs(processor, n=2)
    t = batch["input_ids"].shape[1]
    plan = CapturePlan(query_positions=torch.zeros(2, 1, dtype=torch.long),
                       key_sets={"box": torch.zeros(2, t + 1, dtype=torch.bool)})
    with pytest.raises(VRHError, match="length"), torch.no_grad(), capture_attention(model, plan):
        model(**batch)
    assert text_impl(model) == "sdpa"


@pytest.fixture(scope="module")
def sliding_qwen(tmp_path_factory):
    """Tiny Qwen2.5-VL whose layer 1 uses an 8-token sliding window (shorter than the prompts)."""
    from vrh_lmms.model.tiny.qwen2_5_vl import build

    path = build(tmp_path_factory.mktemp("tiny_qwen25_sliding"), seed=1,
                 text={"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1})
    model, processor = load_tiny(path)
    assert locate_decoder(model).text_config.layer_types == ["full_attention", "sliding_attention"]
    return model, processor_inputs(processor, n=2)


def test_sliding_window_layers(sliding_qwen):
    model, batch = sliding_qwen
    t = batch["input_ids"].shape[1]
    far = torch.zeros(2, t, dtype=torch.bool)
    far[:, : t - 8] = True  # keys outside the last row's window
    plan = random_plan(batch)
    plan.key_sets["far"] = far
    with torch.no_grad():
        plain = model(**batch).logits
        with capture_attention(model, plan) as handle:
            captured = model(**batch).logits
    torch.testing.assert_close(captured, plain, rtol=0, atol=0)
    result = handle.result()
    assert (result.mass["far"][0, 1, :, 0] == 0).all()  # layer 1 slides: row t-1 sees only the last 8 keys
    assert (result.mass["far"][0, 0, :, 0] > 0).all()  # layer 0 is full attention
    assert_matches_eager(result, plan, eager_attentions(model, batch))


def test_gemma2_softcap_and_prefix(tiny_checkpoints):
    """PaliGemma2: Gemma2 text runs eager with soft-capping; image + prompt prefix attends bidirectionally."""
    need_tiny("paligemma")
    model, processor = load_tiny(tiny_checkpoints("paligemma"))
    text = locate_decoder(model).text_config
    assert text.attn_logit_softcapping is not None
    batch = processor_inputs(processor, n=2)
    ids = batch["input_ids"]
    assert "sliding_attention" in text.layer_types and ids.shape[1] > text.sliding_window  # the window binds
    image = ids == model.config.image_token_id
    first_image = int(image[0].nonzero()[0])
    later = torch.zeros_like(image)
    later[0, first_image + 1:] = image[0, first_image + 1:]
    plan = CapturePlan(query_positions=torch.tensor([[first_image], [-1]]), key_sets={"later_image": later})
    with torch.no_grad(), capture_attention(model, plan) as handle:
        model(**batch)
    assert handle.base == "eager"
    result = handle.result()
    assert (result.mass["later_image"][0, :, :, 0] > 0).all()  # a causal mask would give exactly 0
    assert_matches_eager(result, plan, eager_attentions(model, batch))
