"""Uniform-attention ablation equals a hand computation (mean of the value states over the keys a row may see, or
over the image tokens among them), touches nothing else, and never looks ahead: generation under the ablation
matches a teacher-forced forward of the generated sequence."""

from __future__ import annotations

import pytest
import torch
from oracles.intervention_refs import eager_probs, head_slice, layer_tensors

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import HeadRef
from vrh_lmms.model.backbone import installed_rows_hooks, locate_decoder
from vrh_lmms.model.interventions.uniform import UniformAblation, image_token_ids, uniform_ablated
from vrh_lmms.model.tiny.inputs import load_tiny, processor_inputs

torch.set_num_threads(1)


@pytest.mark.parametrize("family", ["qwen2_5_vl", "paligemma", "internvl"])
@pytest.mark.parametrize("over", ["prefix", "image"])
def test_uniform_equals_mean_of_visible_values(family, over, tiny_checkpoints):
    model, processor = load_tiny(tiny_checkpoints(family))
    batch = processor_inputs(processor, n=2)  # left-padded: padding keys must not count
    t = batch["input_ids"].shape[1]
    prompt_len, head = t - 3, 2
    g = locate_decoder(model).geometry
    visible = eager_probs(model, batch)[:, 0, head] > 0  # (b, T, T): what each row of head `head` may see
    if over == "image":
        visible &= torch.isin(batch["input_ids"], torch.tensor(image_token_ids(model)))[:, None, :]
    with torch.no_grad(), layer_tensors(model, 0) as plain:
        model(**batch)
    with torch.no_grad(), layer_tensors(model, 0) as ablated, uniform_ablated(model, [HeadRef(0, head)], over,
                                                                              prompt_len=prompt_len):
        model(**batch)
    rows = slice(prompt_len - 1, t)
    w = visible[:, rows].float()
    v = plain["v"][:, head // (g.heads // g.kv_heads)]
    expected = torch.matmul(w / w.sum(-1, keepdim=True), v)
    got = head_slice(ablated["o_in"], head, g.head_dim)
    torch.testing.assert_close(got[:, rows], expected, rtol=0, atol=1e-5)
    assert not torch.allclose(got[:, rows], head_slice(plain["o_in"], head, g.head_dim)[:, rows], atol=1e-3)
    assert torch.equal(got[:, :prompt_len - 1], head_slice(plain["o_in"], head, g.head_dim)[:, :prompt_len - 1])
    for h in range(g.heads):
        if h != head:
            assert torch.equal(head_slice(ablated["o_in"], h, g.head_dim), head_slice(plain["o_in"], h, g.head_dim))
    assert not installed_rows_hooks()


@pytest.mark.parametrize("over", ["prefix", "image"])
def test_generation_never_looks_ahead(over, tiny_checkpoints):
    """Each generated token's scores under the ablation equal the teacher-forced forward of the final sequence at
    that row: the rows saw only their prefix while generating, exactly as in the full forward."""
    model, processor = load_tiny(tiny_checkpoints("qwen2_5_vl"))
    batch = processor_inputs(processor, n=2)
    heads = [HeadRef(0, 1), HeadRef(1, 3)]
    p = batch["input_ids"].shape[1]
    with torch.no_grad(), uniform_ablated(model, heads, over):
        gen = model.generate(**batch, max_new_tokens=4, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, min_new_tokens=4)
    seq = gen.sequences
    full = dict(batch, input_ids=seq, attention_mask=torch.cat(
        [batch["attention_mask"], torch.ones(2, seq.shape[1] - p, dtype=torch.long)], 1),
        mm_token_type_ids=torch.cat([batch["mm_token_type_ids"], torch.zeros(2, seq.shape[1] - p, dtype=torch.long)],
                                    1))
    with torch.no_grad(), uniform_ablated(model, heads, over, prompt_len=p):
        logits = model(**full).logits
    for i, scores in enumerate(gen.logits):
        torch.testing.assert_close(logits[:, p - 1 + i], scores, rtol=0, atol=1e-4)
    with torch.no_grad():
        plain = model.generate(**batch, max_new_tokens=4, do_sample=False, output_logits=True,
                               return_dict_in_generate=True, min_new_tokens=4)
    assert any(not torch.allclose(a, b, atol=1e-4) for a, b in zip(plain.logits, gen.logits))


def test_uniform_checks_and_restores(tiny_checkpoints):
    model, processor = load_tiny(tiny_checkpoints("qwen2_5_vl"))
    impl = locate_decoder(model).text_config._attn_implementation
    with pytest.raises(VRHError, match="over"):
        UniformAblation(model, [HeadRef(0, 0)], over="box")
    with pytest.raises(VRHError, match="outside the model"):
        UniformAblation(model, [HeadRef(0, 99)])
    ablation = UniformAblation(model, [HeadRef(0, 0)])
    with pytest.raises(VRHError, match="already carry"):
        UniformAblation(model, [HeadRef(0, 1)])
    ablation.remove()
    assert not installed_rows_hooks() and locate_decoder(model).text_config._attn_implementation == impl


def test_uniform_is_an_ablation_mode_of_backends_and_sweeps(tiny_checkpoints, tmp_path, monkeypatch):
    """`ablation=uniform` through the vrh_* backend equals the direct ablation, is undone exactly, and sweep
    configurations are labelled like the other modes (id suffix, vrh.ablation.mode)."""
    import json

    import numpy as np

    from vrh_lmms.base.heads import Geometry
    from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file
    from vrh_lmms.base.heads.plan import plan_configurations
    from vrh_lmms.base.heads.spec import HeadSet
    from vrh_lmms.harness import lmms
    from vrh_lmms.runs.sweep.run import SweepSpec, run_sweep

    monkeypatch.setenv("VRH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 2, "seed": 4}))
    ckpt = tiny_checkpoints("qwen2_5_vl")
    args = f"pretrained={ckpt},dtype=float32,min_pixels={224 * 224},max_pixels={224 * 224}"
    lm = lmms.build_model("vrh_qwen25", args)
    model, processor = load_tiny(ckpt)
    batch = processor_inputs(processor, n=2)
    heads = [HeadRef(0, 1), HeadRef(1, 2)]
    gen = {"max_new_tokens": 4, "do_sample": False, "output_logits": True, "return_dict_in_generate": True}
    with torch.no_grad():
        plain = lm.model.generate(**batch, **gen)
        lm.vrh_apply(HeadSet(tuple(heads), "L0H1;L1H2", "explicit", 2), mode="uniform")
        assert lm.vrh_record()["ablation"]["mode"] == "uniform" and lm.vrh_ablator.method == "attention"
        ablated = lm.model.generate(**batch, **gen)
        with uniform_ablated(model, heads):
            direct = model.generate(**batch, **gen)
        lm.vrh_apply(HeadSet((), "none", "baseline", 0))
        again = lm.model.generate(**batch, **gen)
    assert all(torch.equal(a, b) for a, b in zip(ablated.logits, direct.logits))
    assert all(torch.equal(a, b) for a, b in zip(again.logits, plain.logits))
    assert not installed_rows_hooks()

    scores = np.random.default_rng(1).random((2, 4))
    hf = tmp_path / "heads.json"
    mass = {"query": "out", "scores": (scores * 0.5).tolist()}
    save_heads_file(HeadsFile({"id": str(ckpt), "family": "qwen2_5_vl"}, Geometry(2, 4, 2, 16), scores,
                              ranking_from_scores(scores), extra={"image_mass": mass}), hf)
    configs = plan_configurations([1], 1, False, ["zero", "uniform", "uniform_image"], random=False,
                                  controls=["image-matched"], control_tolerance=1.0)
    assert [c.id for c in configs] == ["baseline", "top1", "image_matched1_s0", "top1_uniform",
                                       "image_matched1_s0_uniform", "top1_uniform_image",
                                       "image_matched1_s0_uniform_image"]
    out = run_sweep(SweepSpec(model="vrh_qwen25", model_args=args, tasks=["vrh_synth_grounding"],
                              heads_file=str(hf), configurations=configs, gen_kwargs="max_new_tokens=6"),
                    tmp_path / "sweep", lm=lm, progress=False)
    for cid, mode in (("top1_uniform", "uniform"), ("top1_uniform_image", "uniform_image"), ("top1", "zero"),
                      ("image_matched1_s0_uniform", "uniform")):
        vrh = json.loads((out / "configs" / cid / "results.json").read_text())["vrh"]
        assert vrh["ablation"]["mode"] == mode and vrh["config"]["id"] == cid
    matched = json.loads((out / "configs" / "image_matched1_s0" / "results.json").read_text())["vrh"]
    assert matched["config"]["kind"] == "image_matched" and matched["ablation"]["heads"]
    assert matched["ablation"]["heads"] != json.loads((out / "configs" / "top1" / "results.json").read_text())[
        "vrh"]["ablation"]["heads"]
    assert not installed_rows_hooks()
