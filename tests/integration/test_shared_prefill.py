"""A packed prefill computes the rows its configurations share once (vrh_lmms.model.shared_prefill), on every tiny
real-class family in float32:

- the prefill's logits and every layer's keys and values equal, bit for bit, those of the same packed batch with
  every row running every layer;
- packed `generate` returns the same tokens with and without sharing;
- the sharing really happens (fewer rows computed, counted) and an argument the wrappers cannot place runs the layer
  on the full batch.
"""

from __future__ import annotations

import pytest
import test_packing
import torch
from test_packing import scenes_batch
from transformers import DynamicCache

from vrh_lmms.base.heads import HeadRef
from vrh_lmms.model.ablation import RowAblator, RowConfig
from vrh_lmms.model.packing import PackedGenerate
from vrh_lmms.model.shared_prefill import PrefillPlan, SharedPrefill, _rows_arg, _Unshareable

family = test_packing.family  # every tiny real-class family, as the packing tests load it
pytestmark = [pytest.mark.exact, pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")]
torch.set_num_threads(1)


def sharing_configs(decoder) -> list[RowConfig]:
    """Baseline; heads only in the top layer; the same heads mean-ablated; heads in the first layer; heads in the
    second layer and above; a duplicate of the top-layer set (its rows share everything with it). Layers that have
    heads (a hybrid decoder's attention layers)."""
    g = decoder.geometry
    layers = g.attention_layers
    first, second, top = layers[0], layers[min(1, len(layers) - 1)], layers[-1]
    return [RowConfig(()),
            RowConfig((HeadRef(top, 0), HeadRef(top, g.heads - 1))),
            RowConfig((HeadRef(top, 0), HeadRef(top, g.heads - 1)), "mean"),
            RowConfig((HeadRef(first, 1), HeadRef(top, 1))),
            RowConfig((HeadRef(second, 0),)),
            RowConfig((HeadRef(top, 0), HeadRef(top, g.heads - 1)))]


def hybrid(decoder) -> bool:
    return decoder.geometry.head_layers is not None


def skip_hybrid(decoder) -> None:
    if hybrid(decoder):
        pytest.skip("a hybrid decoder's prefill is never shared (its linear layers' recurrent state is not split by "
                    "rows); test_packed_generate_same_tokens_with_and_without_sharing checks that it runs unshared")


def packed_prefill(model, processor, decoder, configs, means, share: bool):
    """Logits and KV cache of one packed forward (every scene copied once per configuration)."""
    k = len(configs)
    batch = scenes_batch(processor, repeat=k)
    layout = [c for _ in range(batch["input_ids"].shape[0] // k) for c in range(k)]
    rows = RowAblator(decoder, configs, means=means, method="fold")
    shared = SharedPrefill(decoder, rows)
    cache = DynamicCache()
    with rows, torch.no_grad():
        rows.set_rows(layout)
        shared.install()
        try:
            if share:
                shared.arm(layout, rows_per_doc=k)
            logits = model(**batch, past_key_values=cache, use_cache=True).logits
        finally:
            shared.uninstall()
    kv = [(layer.keys, layer.values) for layer in cache.layers] if hasattr(cache, "layers") else list(
        zip(cache.key_cache, cache.value_cache))
    return logits, kv, shared


def test_shared_prefill_equals_the_full_batch_bit_for_bit(family):
    name, model, _, decoder, means, processor = family
    skip_hybrid(decoder)
    configs = sharing_configs(decoder)
    want, want_kv, _ = packed_prefill(model, processor, decoder, configs, means, share=False)
    got, got_kv, shared = packed_prefill(model, processor, decoder, configs, means, share=True)
    assert shared.shared_layers > 0 and shared.unshared_layers == 0, (name, shared.shared_layers)
    assert torch.equal(got, want), (name, (got - want).abs().max())
    assert len(got_kv) == len(want_kv) == decoder.geometry.layers
    for layer, ((gk, gv), (wk, wv)) in enumerate(zip(got_kv, want_kv)):
        assert torch.equal(gk, wk) and torch.equal(gv, wv), (name, layer)
    # the configurations really differ: a control that can move
    k = len(configs)
    assert not torch.equal(got[0::k], got[3::k]) and not torch.equal(got[0::k], got[1::k])


def test_packed_generate_same_tokens_with_and_without_sharing(family):
    name, model, _, decoder, means, processor = family
    configs = sharing_configs(decoder)
    batch = scenes_batch(processor)
    answers = {}
    for share in (False, True):
        pack = PackedGenerate(model, decoder, configs, means=means, share_prefill=share)
        with pack, torch.no_grad():
            answers[share] = []
            for j in range(len(configs)):
                pack.serve(j)
                answers[share].append(model.generate(**batch, do_sample=False, max_new_tokens=6))
        assert pack.stats.packed_calls == 1
        if share:  # a hybrid decoder's prefill is never shared
            assert (pack.shared.shared_layers > 0) != hybrid(decoder), (name, pack.shared.shared_layers)
    for j, (a, b) in enumerate(zip(answers[False], answers[True])):
        assert torch.equal(a, b), (name, j)


def test_plan_groups_rows_by_doc_and_heads_below():
    h = HeadRef
    configs = [RowConfig(()), RowConfig((h(2, 0),)), RowConfig((h(2, 0),)), RowConfig((h(0, 1), h(2, 3))),
               RowConfig((h(2, 0),), "mean")]
    layout = [0, 1, 2, 3, 4] * 2  # two docs, five configurations each
    plan = PrefillPlan.build(configs, layout, rows_per_doc=5, layers=3)
    # layer 0: config 3 ablates there; its input is still the doc's trunk
    assert plan.layer[0].take.tolist() == [0, 3, 5, 8]
    assert plan.layer[0].spread.tolist() == [0, 0, 0, 1, 0, 2, 2, 2, 3, 2]
    assert plan.attention[0].take.tolist() == [0, 2]  # of the layer's 4 rows: one per doc
    assert plan.attention[0].spread.tolist() == [0, 0, 1, 1]
    # layer 1 touches nothing: rows of layer 0's groups stay shared
    assert plan.layer[1].take.tolist() == [0, 3, 5, 8] and plan.attention[1].trivial
    # layer 2: zero and mean ablation of the same head differ; configs 1 and 2 are the same head set
    assert plan.layer[2].take.tolist() == [0, 1, 3, 4, 5, 6, 8, 9]
    assert plan.layer[2].spread.tolist() == [0, 1, 1, 2, 3, 4, 5, 5, 6, 7]
    assert plan.attention[2].spread.tolist() == [0, 0, 1, 0, 2, 2, 3, 2]
    assert plan.computed_rows() == (2 + 4 + 4, 4 + 4 + 8)


def test_arguments_whose_rows_cannot_be_told_are_refused():
    index = torch.tensor([0, 2])
    hidden = torch.randn(4, 5, 8)
    assert torch.equal(_rows_arg("hidden_states", hidden, 4, index), hidden[[0, 2]])
    mrope = torch.randn(3, 4, 5, 8)
    assert torch.equal(_rows_arg("position_embeddings", (mrope, mrope), 4, index)[0], mrope[:, [0, 2]])
    broadcast = torch.randn(1, 1, 5, 5)
    assert _rows_arg("attention_mask", broadcast, 4, index) is broadcast
    for name, value in [("attention_mask", torch.randn(3, 1, 5, 5)), ("cu_seq_lens_q", torch.arange(4)),
                        ("something", torch.randn(4, 5)), ("position_ids", torch.zeros(2, 5)),
                        ("masks", [torch.randn(4, 5)])]:
        with pytest.raises(_Unshareable):
            _rows_arg(name, value, 4, index)


def test_an_unplaceable_argument_runs_the_layer_unshared(family):
    name, model, _, decoder, means, processor = family
    skip_hybrid(decoder)
    configs = sharing_configs(decoder)
    want, _, _ = packed_prefill(model, processor, decoder, configs, means, share=False)
    layer0 = decoder.layers[0]
    original = layer0.forward

    def with_extra(*args, **kwargs):  # takes the batch-shaped argument the wrappers do not know back out
        kwargs.pop("extra_rows")
        return original(*args, **kwargs)

    layer0.forward = lambda *a, **kw: with_extra(*a, **kw)
    try:
        k = len(configs)
        batch = scenes_batch(processor, repeat=k)
        rows_n = batch["input_ids"].shape[0]
        layout = [c for _ in range(rows_n // k) for c in range(k)]
        rows = RowAblator(decoder, configs, means=means, method="fold")
        shared = SharedPrefill(decoder, rows)
        with rows, torch.no_grad():
            rows.set_rows(layout)
            shared.install()
            inner = layer0.forward

            def unknown(*args, **kwargs):
                return inner(*args, extra_rows=torch.zeros(rows_n, 1), **kwargs)

            layer0.forward = unknown
            try:
                shared.arm(layout, rows_per_doc=k)
                got = model(**batch).logits
            finally:
                layer0.forward = inner
                shared.uninstall()
    finally:
        del layer0.forward
    assert shared.unshared_layers == 1 and shared.shared_layers > 0, name
    assert torch.equal(got, want), name


def test_a_hook_on_a_head_site_turns_sharing_off(family):
    """A pre-hook on an o_proj (a steering edit, a recorder) would see the shared rows: the call runs unshared."""
    name, model, _, decoder, means, processor = family
    skip_hybrid(decoder)
    configs = sharing_configs(decoder)
    want, _, _ = packed_prefill(model, processor, decoder, configs, means, share=False)
    seen: list[int] = []
    handle = decoder.out_projs[-1].register_forward_pre_hook(lambda module, args: seen.append(args[0].shape[0]))
    try:
        got, _, shared = packed_prefill(model, processor, decoder, configs, means, share=True)
    finally:
        handle.remove()
    assert shared.shared_layers == 0, name
    assert torch.equal(got, want) and seen == [want.shape[0]], (name, seen)
