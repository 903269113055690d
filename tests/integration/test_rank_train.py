"""The ranking loss and `vrh-lmms rank-train` on a tiny random-weight Qwen2.5-VL (2 layers x 4 heads, 2 kv heads):
the loss's gradient against finite differences (float64), where the gradient may flow, one training step through
the CLI and the checkpoint through the lmms-eval backend."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from oracles.intervention_refs import eager_attentions
from safetensors.torch import load_file

from vrh_lmms.base.heads.geometry import Geometry, HeadRef
from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file
from vrh_lmms.base.synth.demo_spec import DemoSpec
from vrh_lmms.base.synth.scenes import SceneConfig
from vrh_lmms.cli import main
from vrh_lmms.model.tiny.inputs import load_tiny
from vrh_lmms.runs.rank.capture import checked_spans, multi_image_inputs
from vrh_lmms.runs.rank.data import synth_set
from vrh_lmms.runs.rank.loss import candidate_masses, head_rows, listwise_loss
from vrh_lmms.runs.rank.train import build_examples, ranking_step_loss

torch.set_num_threads(1)
PIXELS = 3136  # 56 x 56: 4 image tokens per candidate
CFG = SceneConfig(image_size=56, min_size=12, max_size=24)


@pytest.fixture(scope="module")
def example(tiny_qwen25):
    """A 3-candidate synthetic query with its answer, as rank-train builds it."""
    _, processor = load_tiny(tiny_qwen25)
    data = synth_set(1, 3, seed=0, start=0, cfg=CFG)
    return build_examples(processor, data, "Locate {query}.", True, DemoSpec(image_size=56))[0]


def _loss(model, ex, heads, lm_weight=0.0):
    return ranking_step_loss(model, ex, heads, temperature=0.1, lm_weight=lm_weight).loss


def _norm_in_input_dtype(self, hidden_states):
    """Qwen2.5-VL's RMSNorm without its float32 round trip, so a float64 model is float64 throughout."""
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


def test_rows_are_eager_attention_and_gradient_matches_finite_differences(tiny_qwen25, example, monkeypatch):
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl

    monkeypatch.setattr(modeling_qwen2_5_vl.Qwen2_5_VLRMSNorm, "forward", _norm_in_input_dtype)
    model, _ = load_tiny(tiny_qwen25)
    model = model.double()
    heads = [HeadRef(1, 2), HeadRef(0, 1)]
    inputs = {k: v for k, v in example.items() if not k.startswith("rank_")}
    inputs["pixel_values"] = inputs["pixel_values"].double()
    ex = {**example, **inputs}
    pos = example["rank_position"]
    with head_rows(model, heads, pos) as grab:
        model(**inputs)
    attn = eager_attentions(model, inputs)[0]
    torch.testing.assert_close(grab.stacked().detach(), torch.stack([attn[1, 2, pos], attn[0, 1, pos]]),
                               rtol=0, atol=1e-7)  # eager softmax runs in float32

    layer1 = model.model.language_model.layers[1].self_attn
    params = {"q_proj": layer1.q_proj.weight, "k_proj": layer1.k_proj.weight,
              "layer0 v_proj": model.model.language_model.layers[0].self_attn.v_proj.weight}
    model.zero_grad()
    _loss(model, ex, heads).backward()
    rng = np.random.default_rng(0)
    eps = 1e-6
    for name, w in params.items():
        rows = range(2 * 16, 3 * 16) if name == "q_proj" else range(w.shape[0])  # head 2's query rows
        for _ in range(3):
            i, j = int(rng.choice(list(rows))), int(rng.integers(w.shape[1]))
            with torch.no_grad():
                w[i, j] += eps
                up = float(_loss(model, ex, heads))
                w[i, j] -= 2 * eps
                down = float(_loss(model, ex, heads))
                w[i, j] += eps
            fd = (up - down) / (2 * eps)
            assert float(w.grad[i, j]) == pytest.approx(fd, rel=1e-5, abs=1e-9), (name, i, j)
        assert w.grad.abs().max() > 0, name


def test_gradient_stays_at_or_below_the_chosen_heads(tiny_qwen25, example):
    model, _ = load_tiny(tiny_qwen25)
    heads = [HeadRef(0, 1)]
    model.zero_grad()
    _loss(model, example, heads).backward()
    lm = model.model.language_model
    grads = {n: (p.grad is not None and bool(p.grad.abs().max() > 0)) for n, p in model.named_parameters()}
    above = [n for n in grads if ".layers.1." in n and "visual" not in n and grads[n]]
    assert not above, f"gradient above the chosen layer: {above}"
    assert not grads["lm_head.weight"]
    attn0 = lm.layers[0].self_attn
    q = attn0.q_proj.weight.grad.abs().sum(1).reshape(4, 16).sum(1)
    assert q[1] > 0 and torch.all(q[[0, 2, 3]] == 0), "only the chosen head's query rows"
    k = attn0.k_proj.weight.grad.abs().sum(1).reshape(2, 16).sum(1)
    assert k[0] > 0 and k[1] == 0, "only the key head the chosen head reads (GQA group 0)"
    for name in ("v_proj", "o_proj"):
        assert getattr(attn0, name).weight.grad is None or not getattr(attn0, name).weight.grad.any(), name
    assert grads["model.language_model.embed_tokens.weight"] and any(grads[n] for n in grads if "visual" in n)
    # with the LM loss the whole decoder learns
    model.zero_grad()
    _loss(model, example, heads, lm_weight=1.0).backward()
    assert lm.layers[1].mlp.down_proj.weight.grad.abs().max() > 0


def test_listwise_loss_is_the_gold_cross_entropy():
    masses = torch.tensor([0.1, 0.5, 0.2])
    expected = -torch.log(torch.exp(masses[1] / 0.1) / torch.exp(masses / 0.1).sum())
    torch.testing.assert_close(listwise_loss(masses, 1, 0.1), expected)
    rows = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]])
    torch.testing.assert_close(candidate_masses(rows, [torch.tensor([0, 1]), torch.tensor([3])]),
                               torch.tensor([0.5, 0.25]))


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for path in sorted(folder.glob("*.safetensors")):
        out.update(load_file(path))
    return out


@pytest.fixture()
def tiny_heads(tmp_path) -> Path:
    scores = np.zeros((2, 4))
    scores[1, 3], scores[0, 1] = 2.0, 1.0
    path = tmp_path / "heads.json"
    save_heads_file(HeadsFile({"id": "tiny", "family": "qwen2_5_vl"}, Geometry(2, 4, 2, 16), scores,
                              ranking_from_scores(scores)), path)
    return path


def test_rank_train_refuses_evaluation_scenes_in_one_line(tiny_qwen25, tiny_heads, tmp_path, capsys):
    rc = main(["rank-train", "--model-dir", str(tiny_qwen25), "--heads-file", str(tiny_heads), "--k", "2",
               "--scene-start", "100000", "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "--scene-start 100000" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_two_steps_change_weights_record_losses_and_load_in_lmms_eval(tiny_qwen25, tiny_heads, tmp_path, capsys,
                                                                      vrh_env):
    out = tmp_path / "ranked"
    argv = ["rank-train", "--model-dir", str(tiny_qwen25), "--heads-file", str(tiny_heads), "--k", "2", "--n", "2",
            "--candidates", "2", "--lr", "1e-3", "--output", str(out)]
    assert main(argv) == 0
    record = json.loads((out / "rank_train.json").read_text())
    assert record["heads"] == ["L0H1", "L1H3"] and record["settings"]["steps"] == 2
    assert [s["step"] for s in record["steps"]] == [1, 2]
    assert all(s["rank_loss"] > 0 and s["lm_loss"] > 0 for s in record["steps"])
    assert record["data"]["scene_ids"][0] == 200_000
    before, after = _weights(tiny_qwen25), _weights(out)
    assert before.keys() == after.keys()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert any("layers.1.self_attn.q_proj" in k for k in changed)
    assert "wrote" in capsys.readouterr().out
    assert main(argv) == 2 and "--force" in capsys.readouterr().err  # an earlier result is not overwritten

    from vrh_lmms.harness.lmms import build_model, evaluate, task_manager

    vrh_env.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 1, "seed": 4}))
    lm = build_model("vrh_qwen25", f"pretrained={out},dtype=float32,min_pixels={PIXELS},max_pixels={PIXELS}")
    results = evaluate(lm, ["vrh_synth_grounding"], task_manager(), limit=1, gen_kwargs="max_new_tokens=4")
    assert len(results["samples"]["vrh_synth_grounding"]) == 1


def test_spans_of_the_training_example_are_the_rankers(tiny_qwen25, example):
    _, processor = load_tiny(tiny_qwen25)
    data = synth_set(1, 3, seed=0, start=0, cfg=CFG)
    q = data.queries[0]
    inputs = multi_image_inputs(processor, f"Locate {q.text}.", data.sets[q.set_id].images, True)
    spans = checked_spans(processor, inputs)
    assert [s.tolist() for s in example["rank_spans"]] == [s.tolist() for s in spans]
    assert example["rank_position"] == inputs["input_ids"].shape[1] - 1
    labelled = example["labels"][0] != -100
    assert not labelled[:example["rank_position"] + 1].any() and labelled[-1]


def test_pruned_heads_stay_pruned_through_an_optimiser_step(tiny_qwen25, example):
    from vrh_lmms.runs.rank.train import keep_dead_heads_dead

    model, _ = load_tiny(tiny_qwen25)
    o_proj = model.model.language_model.layers[1].self_attn.o_proj.weight
    with torch.no_grad():
        o_proj[:, 32:48] = 0  # head 2 of layer 1 writes nothing
    before = o_proj.detach().clone()
    hooks = keep_dead_heads_dead(model, [HeadRef(1, 2)])
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-2)
    _loss(model, example, [HeadRef(0, 1)], lm_weight=1.0).backward()
    optimiser.step()
    for h in hooks:
        h.remove()
    assert torch.all(o_proj[:, 32:48] == 0)
    assert not torch.equal(o_proj[:, :32], before[:, :32])
