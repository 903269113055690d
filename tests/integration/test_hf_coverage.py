"""The coverage table (vrh_lmms.model.coverage) claims only what is tested: every model type it says can be ablated
gets a tiny random checkpoint of its real class here, and its ablation is checked exact against an independent
reference; every other type is refused in one line; docs/models.md is the generated table.

The reference shares no code with vrh_lmms.model.ablation: it finds each layer's attention output projection by
its module path in the model (named_modules), checks its input width against the config's heads x head_dim, and
zeroes the ablated heads' input columns with a forward pre-hook. Where the table claims capture, the same heads are
zeroed once more in attention-output space through the attention function capture, steering and the KV policy
install (vrh_lmms.model.capture.attention), which must give the reference's logits: the claim that the model's
attention runs through it is tested too.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
import transformers

from vrh_lmms.base.heads.geometry import HeadRef
from vrh_lmms.model.ablation import Ablator
from vrh_lmms.model.backbone import survey_decoder
from vrh_lmms.model.capture.attention import attention_edits
from vrh_lmms.model.coverage import coverage, generated_part, image_text_types, markdown, row_for, summary
from vrh_lmms.model.generic import survey, text_config
from vrh_lmms.model.tiny.generic import build_tiny_model

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@functools.lru_cache(maxsize=1)
def table():
    return {r.model_type: r for r in coverage()}


def claimed() -> list[str]:
    return [t for t, r in table().items() if r.ablates]


TYPES = image_text_types()  # cheap: the mapping's names; each test reads its own row (no table at collection)


def _ids(model) -> torch.Tensor:
    """Text ids clear of every special token id the config names (image, video, boi, pad, ...)."""
    special: set[int] = set()

    def collect(cfg) -> None:
        for key, value in cfg.to_dict().items():
            if ("token" in key or "index" in key) and isinstance(value, int):
                special.add(value)
    collect(model.config)
    vocab = int(text_config(model.config).vocab_size)
    pool = [i for i in range(3, min(vocab, 400)) if i not in special]
    g = torch.Generator().manual_seed(0)
    return torch.tensor([pool[i] for i in torch.randint(len(pool), (14,), generator=g)]).unsqueeze(0)


def _logits(model, ids):
    with torch.no_grad():
        try:
            out = model(input_ids=ids, use_cache=False)
        except (TypeError, ValueError):  # a class whose forward insists on images: drive its text model
            out = model.get_decoder()(input_ids=ids, use_cache=False)
    return out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state


def _heads(g) -> list[HeadRef]:
    """In the first and last layers that have heads (a hybrid decoder's linear-attention layers have none)."""
    first, last = g.attention_layers[0], g.attention_layers[-1]
    return [HeadRef(first, 1), HeadRef(last, 0), HeadRef(last, g.heads - 1)]


class _ZeroHeads:
    """An attention edit (vrh_lmms.model.capture.attention.AttentionEdit) zeroing heads of the layer's output."""

    def __init__(self, heads: list[int]) -> None:
        self.heads = heads

    def edit_output(self, layer, module, query, key, value, attention_mask, kwargs, base, output):
        output = output.clone()
        output[:, :, self.heads, :] = 0
        return output


@pytest.mark.exact
@pytest.mark.parametrize("model_type", list(TYPES))
def test_ablation_exact_on_tiny_checkpoint_or_refused_in_one_line(model_type):
    row = row_for(model_type, TYPES[model_type])
    if not row.ablates:  # what the table refuses it refuses in one line, and claims nothing else for it
        assert row.ablation and "\n" not in row.ablation and (row.packing, row.capture) == ("-", "-")
        return
    model = build_tiny_model(model_type)
    found = survey(model)
    assert found.ok, found.refusal
    dec = survey_decoder(found)
    g = dec.geometry
    text = text_config(model.config)
    assert g.heads == text.num_attention_heads
    names = {m: n for n, m in model.named_modules()}
    projs = {i: model.get_submodule(f"{found.layers_path}.{i}.{found.attn_attr}.{found.out_attr}")
             for i in g.attention_layers}
    assert all(p is dec.out_projs[i] for i, p in projs.items()), "the decoder's projections are the layers' own"
    assert all(dec.out_projs[i] is None for i in range(g.layers) if i not in projs)
    assert all("vision" not in names[p] and "visual" not in names[p] for p in projs.values())
    # each layer's head width from its own projection (input width / the config's heads), not from the geometry
    width = {i: int(p.weight.shape[1]) // g.heads for i, p in projs.items()}
    assert all(int(p.weight.shape[1]) == g.heads * width[i] for i, p in projs.items())
    assert width == {i: g.dim(i) for i in projs}
    ids = _ids(model)
    base = _logits(model, ids)
    heads = _heads(g)

    def zero_inputs(cols):
        def pre(_module, args):
            x = args[0].clone()
            for c in cols:
                x[..., c] = 0
            return (x, *args[1:])
        return pre

    by_layer: dict[int, list[int]] = {}
    for h in heads:
        by_layer.setdefault(h.layer, []).append(h.head)
    handles = [projs[layer].register_forward_pre_hook(zero_inputs(
        [c for h in hs for c in range(h * width[layer], (h + 1) * width[layer])])) for layer, hs in by_layer.items()]
    try:
        reference = _logits(model, ids)
    finally:
        for handle in handles:
            handle.remove()
    assert not torch.equal(reference, base), "the reference ablation moved nothing"
    for method in ("fold", "hook"):
        ablator = Ablator(model, dec, method=method)
        ablator.apply(heads)
        try:
            assert torch.equal(_logits(model, ids), reference), method
        finally:
            ablator.restore()
    assert torch.equal(_logits(model, ids), base), "restore gives back the intact model"
    if row.capture == "yes":  # capture's attention path reaches the same heads
        with attention_edits(model, {layer: _ZeroHeads(hs) for layer, hs in by_layer.items()}):
            through_interface = _logits(model, ids)
        torch.testing.assert_close(through_interface, reference, rtol=1e-4, atol=1e-5)
        assert torch.equal(_logits(model, ids), base)


def test_table_claims_enough_and_refuses_the_rest_in_one_line():
    rows = table()
    assert set(rows) == set(image_text_types())
    assert len(claimed()) >= 60, f"only {len(claimed())} types verified"


def test_readme_and_docs_models_md_show_the_generated_table():
    readme = generated_part((ROOT / "README.md").read_text(encoding="utf-8"))
    assert readme == summary(list(table().values()), transformers.__version__), \
        "README.md's model summary is stale: replace it with vrh_lmms.model.coverage.summary's text"
    expected = markdown(list(table().values()), transformers.__version__)
    assert generated_part((ROOT / "docs" / "models.md").read_text(encoding="utf-8")) == expected, \
        "docs/models.md is stale: replace its generated part with `vrh-lmms models --markdown`"
