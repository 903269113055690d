"""The demo trainer: backend-identical inputs, loss goes down, and a seed fixes everything."""

from __future__ import annotations

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


def test_fast_inputs_match_the_backend():
    tok = tiny.make_tokenizer()
    proc = tiny.make_processor(tok, min_pixels=SPEC.pixels, max_pixels=SPEC.pixels)
    scenes = held_out_scenes(SPEC, 3)
    assert FastEncoder(proc, SPEC, scenes[0]).check(scenes) < 1e-5


def test_training_reduces_loss_and_is_deterministic(tmp_path):
    a = train(MICRO, tmp_path / "a", seed=3, log=lambda s: None)
    b = train(MICRO, tmp_path / "b", seed=3, log=lambda s: None)
    assert a["losses"] == b["losses"]
    assert sum(a["losses"][-3:]) / 3 < a["losses"][0]
    from safetensors.torch import load_file

    wa, wb = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert (tmp_path / "a" / "demo_spec.json").exists() and (tmp_path / "a" / "tokenizer_config.json").exists()
