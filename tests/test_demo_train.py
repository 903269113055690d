"""The demo trainer: backend-identical inputs, loss goes down, and a seed fixes everything."""

from __future__ import annotations

import pytest
import torch

from vrh_lmms.demo.data import FastEncoder
from vrh_lmms.demo.probe import held_out_scenes
from vrh_lmms.demo.spec import DemoSpec
from vrh_lmms.demo.train import Design, train
from vrh_lmms.tiny import qwen2_5_vl as tiny

SPEC = DemoSpec(image_size=112, coord_bin=4,
                scene=dict(position_tint=100, min_objects=1, max_objects=2, min_size=20, max_size=28))
MICRO = Design(
    name="micro", spec=SPEC,
    text=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4),
    vision=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, fullatt_block_indexes=[0]),
    steps=12, batch_size=8, lr=3e-3, warmup=2, eval_every=12, eval_n=8, head_drop=0.1, group_lasso=1e-4,
)


@pytest.mark.parametrize("prompt_first", [False, True])
def test_fast_inputs_match_the_backend(prompt_first):
    from dataclasses import replace

    spec = replace(SPEC, prompt_first=prompt_first)
    tok = tiny.make_tokenizer()
    proc = tiny.make_processor(tok, min_pixels=spec.pixels, max_pixels=spec.pixels)
    scenes = held_out_scenes(spec, 3)
    encoder = FastEncoder(proc, spec, scenes[0])
    assert encoder.check(scenes) < 1e-5
    image = encoder.template.tolist().index(proc.image_token_id)
    assert (int(encoder.expr_pos[0]) < image) == prompt_first


def test_training_reduces_loss_and_is_deterministic(tmp_path):
    a = train(MICRO, tmp_path / "a", seed=3, log=lambda s: None)
    b = train(MICRO, tmp_path / "b", seed=3, log=lambda s: None)
    assert a["losses"] == b["losses"]
    assert sum(a["losses"][-3:]) / 3 < a["losses"][0]
    from safetensors.torch import load_file

    wa, wb = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert (tmp_path / "a" / "demo_spec.json").exists() and (tmp_path / "a" / "tokenizer_config.json").exists()


def test_group_lasso_is_the_sum_of_whole_head_norms():
    from dataclasses import replace

    from vrh_lmms.demo.train import build_model, group_lasso, lasso_weight

    model = build_model(MICRO, tiny.make_tokenizer(), seed=0)
    expected = 0.0
    for layer in model.model.language_model.layers:
        a = layer.self_attn
        hd = a.head_dim
        for h in range(a.o_proj.in_features // hd):
            rows = slice(h * hd, (h + 1) * hd)
            parts = [a.o_proj.weight[:, rows].flatten()]
            for proj in (a.q_proj, a.k_proj, a.v_proj):
                parts += [proj.weight[rows].flatten()] + ([proj.bias[rows]] if proj.bias is not None else [])
            expected += float(torch.cat(parts).norm())
    assert float(group_lasso(model)) == pytest.approx(expected, rel=1e-5)
    d = replace(MICRO, group_lasso=2e-3, lasso_from=10, lasso_ramp=4)
    assert [lasso_weight(s, d) for s in (9, 10, 11, 13, 20)] == pytest.approx([0, 5e-4, 1e-3, 2e-3, 2e-3])
