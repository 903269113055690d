"""Head ablation on every tiny real-class family: equals an independent reference, fold == hook, exact restore."""

from __future__ import annotations

import pytest
import torch
from oracles.reference_ablation import random_means, reference_ablation

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import HeadRef
from vrh_lmms.model.ablation import Ablator, HeadMeanCollector, ablated, load_means, save_means
from vrh_lmms.model.backbone import locate_decoder
from vrh_lmms.model.tiny.inputs import load_tiny, processor_inputs
from vrh_lmms.model.tiny.registry import TINY_FACTORIES

torch.set_num_threads(1)


@pytest.fixture(scope="module", params=sorted(TINY_FACTORIES))
def family_model(request, tiny_checkpoints):
    model, processor = load_tiny(tiny_checkpoints(request.param))
    batch = processor_inputs(processor, n=2)
    return request.param, model, batch


def logits(model, batch):
    with torch.no_grad():
        return model(**batch).logits


def some_heads(model):
    """Heads of the first and last layers with heads (every layer but in a hybrid decoder: Qwen3.5's L1, L3)."""
    g = locate_decoder(model).geometry
    first, last = g.attention_layers[0], g.attention_layers[-1]
    return [HeadRef(first, 1 % g.heads), HeadRef(last, 0), HeadRef(last, g.heads - 1)]


def test_geometry_from_o_proj(family_model):
    _, model, _ = family_model
    dec = locate_decoder(model)
    tc = dec.text_config
    first = dec.geometry.attention_layers[0]
    assert dec.geometry.layers == tc.num_hidden_layers
    assert dec.geometry.heads * dec.geometry.head_dim == dec.out_projs[first].in_features
    # The located modules are the decoder's, never the vision tower's.
    decoder_params = {id(p) for p in dec.out_projs[first].parameters()}
    vision = [m for n, m in model.named_modules() if "visual" in n or "vision" in n]
    assert not any(id(p) in decoder_params for v in vision for p in v.parameters(recurse=False))


@pytest.mark.parametrize("method", ["fold", "hook"])
def test_zero_ablation_matches_reference(family_model, method):
    _, model, batch = family_model
    heads = some_heads(model)
    base = logits(model, batch)
    with reference_ablation(model, heads):
        ref = logits(model, batch)
    assert not torch.allclose(ref, base)  # the ablation does something, so agreement below means something
    with ablated(model, heads, method=method) as ab:
        assert ab.method == method
        got = logits(model, batch)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    assert torch.equal(logits(model, batch), base)  # bit-identical after the scope


# float32 noise bound where it is larger than 1e-5: Qwen3.5's gated attention (the reference divides the fill by the
# output gate, which the model multiplies back) under logits of std 2 (every other tiny family: std under 0.2)
MEAN_TOL = {"qwen3_5": 1e-4}


def test_mean_ablation_matches_reference_and_fold_equals_hook(family_model):
    name, model, batch = family_model
    dec = locate_decoder(model)
    g = dec.geometry
    means = random_means(g)
    heads = some_heads(model)
    with reference_ablation(model, heads, fill=means):
        ref = logits(model, batch)
    with ablated(model, heads, mode="mean", means=means, method="fold"):
        fold = logits(model, batch)
    with ablated(model, heads, mode="mean", means=means, method="hook"):
        hook = logits(model, batch)
    torch.testing.assert_close(fold, ref, rtol=1e-4, atol=1e-4)
    tol = MEAN_TOL.get(name, 1e-5)
    torch.testing.assert_close(hook, ref, rtol=tol, atol=tol)
    projs = [p for p in dec.out_projs if p is not None]  # None: a hybrid decoder's layers without heads
    assert all(p.bias is None or p.bias.abs().sum() >= 0 for p in projs)
    biases_before = [None if p.bias is None else p.bias.clone() for p in projs]
    with ablated(model, heads, mode="mean", means=means):
        pass
    for p, b in zip(projs, biases_before):
        assert (p.bias is None) == (b is None) and (b is None or torch.equal(p.bias, b))


def test_restore_on_exception_and_swap(family_model):
    _, model, batch = family_model
    base = logits(model, batch)
    heads = some_heads(model)
    with pytest.raises(RuntimeError):
        with ablated(model, heads):
            raise RuntimeError("boom")
    assert torch.equal(logits(model, batch), base)
    ab = Ablator(model)
    ab.apply(heads[:1])
    one = logits(model, batch)
    ab.apply(heads[1:])  # swapping restores the first set before applying the second
    with ablated(model, heads[1:]):
        pass
    with reference_ablation(model, heads[1:]):
        ref = logits(model, batch)
    torch.testing.assert_close(logits(model, batch), ref, rtol=1e-5, atol=1e-5)
    ab.restore()
    assert torch.equal(logits(model, batch), base) and not torch.equal(one, base)


def test_bad_inputs_are_named(family_model):
    _, model, _ = family_model
    g = locate_decoder(model).geometry
    first = g.attention_layers[0]
    with pytest.raises(VRHError, match="outside the model"):
        Ablator(model).apply([HeadRef(g.layers, 0)])
    with pytest.raises(VRHError, match="needs per-head mean"):
        Ablator(model).apply([HeadRef(first, 0)], mode="mean")
    with pytest.raises(VRHError, match="mode 'half'"):
        Ablator(model).apply([HeadRef(first, 0)], mode="half")
    for layer in sorted(set(range(g.layers)) - set(g.attention_layers)):  # a hybrid decoder's linear layers
        with pytest.raises(VRHError, match=f"L{layer}H0 is in a layer without attention heads"):
            Ablator(model).apply([HeadRef(layer, 0)])


def test_hook_fallback_when_weights_are_not_editable(family_model):
    _, model, batch = family_model
    heads = some_heads(model)
    dec = locate_decoder(model)
    proj = dec.out_projs[dec.geometry.attention_layers[0]]
    with reference_ablation(model, heads):
        ref = logits(model, batch)
    # Simulate a quantized projection: integer weights cannot be folded, so auto must pick the hook.
    real = proj.weight
    proj.weight = torch.nn.Parameter(real.detach().to(torch.int8), requires_grad=False)
    try:
        ab = Ablator(model)
        assert ab.resolve_method() == "hook"
        with pytest.raises(VRHError, match="'fold' impossible"):
            Ablator(model, method="fold").apply(heads)
    finally:
        proj.weight = real
    with ablated(model, heads, method="hook"):
        torch.testing.assert_close(logits(model, batch), ref, rtol=1e-5, atol=1e-5)


def test_head_means_collected_and_round_trip(family_model, tmp_path):
    _, model, batch = family_model
    dec = locate_decoder(model)
    g = dec.geometry
    captured = {}
    handle = dec.out_projs[1].register_forward_pre_hook(lambda m, a: captured.setdefault("x", a[0].detach()))
    with HeadMeanCollector(model) as col:
        col.token_mask = batch["attention_mask"].bool()
        logits(model, batch)
    handle.remove()
    x = captured["x"][batch["attention_mask"].bool()]
    expect = x.double().mean(0).reshape(g.heads, g.dim(1)).float()
    means = col.means()
    torch.testing.assert_close(means[1, :, :g.dim(1)], expect, rtol=1e-5, atol=1e-6)
    path = save_means(means, tmp_path / "m.safetensors", g, col.count)
    assert torch.equal(load_means(path), means)
