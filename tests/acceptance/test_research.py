"""The research folder (research/): designs p1-p21, the head lasso as a phase hook of the package's trainer, the
probe and the causal protocol. It stays out of the installed package (tests/unit/test_import_cycles.py checks that the
package never imports it) and is covered here."""

from __future__ import annotations

import json
from dataclasses import fields, replace

import pytest
import torch
from test_demo_train import MICRO, _encoders

from research.demo_model.model_heads import group_norms, head_groups, head_params
from research.demo_model.train import Design, build_model, checkpoint_state, make_tokenizer, train
from research.head_lasso import LassoDesign, lasso_weight, prox_step, with_lasso
from vrh_lmms.base.paths import assets_path


def test_the_research_line_derives_the_shipped_design():
    """research/designs.py's p21 (p19 + layer 2 pruned, through the whole p1-p19 line) equals the package's spelled-out
    P21, which equals the design the shipped model records (its lasso settings, gone from the package, were off)."""
    from research.demo_model import designs as shipped
    from research.designs import DESIGNS, LATEST

    assert DESIGNS[LATEST] == shipped.DESIGNS[shipped.LATEST] == shipped.P21 and type(DESIGNS[LATEST]) is Design
    recorded = json.loads((assets_path() / "demo_model" / "train_design.json").read_text())["design"]
    lasso = {k: recorded.pop(k) for k in ("head_lasso", "head_lasso_layers", "head_lasso_steps")}
    assert lasso == {"head_lasso": 0.0, "head_lasso_layers": [], "head_lasso_steps": [0, 0]}
    assert json.loads(json.dumps(shipped.P21.to_dict())) == recorded
    assert set(shipped.DESIGNS) == {"p21"}  # what `vrh-lmms train-tiny --design` offers


def test_research_designs_build_and_lasso_designs_round_trip():
    from research.designs import DESIGNS

    assert list(DESIGNS) == [f"p{i}" for i in range(1, 22) if i != 10]
    lasso = {n for n, d in DESIGNS.items() if isinstance(d, LassoDesign)}
    assert lasso == {"p11", "p12", "p14"} and DESIGNS["p11"].head_lasso == 25.0
    p11 = DESIGNS["p11"]
    record = json.loads(json.dumps(p11.to_dict()))  # as train_design.json holds it
    back = LassoDesign.from_dict(record)
    assert type(back) is LassoDesign and back.head_lasso_layers == (3, 4, 5) and back.head_lasso_steps == (1000, 2000)
    assert json.loads(json.dumps(back.to_dict())) == record
    assert {f.name for f in fields(Design)} < {f.name for f in fields(LassoDesign)}


def test_research_train_names_an_unknown_design(capsys):
    from research.train import main

    with pytest.raises(SystemExit) as exc:
        main(["--design", "t9", "--out", "unused"])
    assert exc.value.code == 2 and "unknown design 't9'; known: p1, p2" in capsys.readouterr().err


def test_a_state_saved_before_the_lasso_moved_still_resumes(tmp_path):
    """Resume states written while the trainer held the lasso (`lasso_start`) load with it as their hook's state."""
    from research.demo_model import run_state

    base = dict(phase="joint", step=2, model={}, optimizer={}, drop_generator=torch.zeros(1), seconds=1.0)
    for legacy, hooks in ((1.5, [{"lasso_start": 1.5}]), (None, None)):
        torch.save(base | {"history": [], "lasso_start": legacy, "prune": None, "prune_extra": None},
                   run_state.resume_path(tmp_path))
        assert run_state.load_state(tmp_path).hooks == hooks


def test_protocol_runs_end_to_end_on_a_trained_checkpoint(tmp_path):
    """`python -m research.protocol` on a real (micro) checkpoint: one k row, localisation beside Acc@0.5."""
    from research import protocol

    design = replace(MICRO, head_drop=0.0, text_phases=((2, (), 0),), align_steps=2, joint_steps=2)
    train(design, tmp_path / "m", seed=0, log=lambda s: None)
    assert protocol.main([str(tmp_path / "m"), "--ks", "1", "--draws", "2", "--n", "8", "--n-score", "4",
                          "--pairs", "2", "--out", str(tmp_path / "p")]) == 0
    out = json.loads((tmp_path / "p" / "protocol.json").read_text())
    g = out["grounding"]
    assert g["complete"] and out["recall"]["complete"] and [r["k"] for r in g["rows"]] == [1]
    assert g["baseline_acc"] <= g["localised"] <= 1.0 and 1 / 5 <= g["uniform_pick"] <= 1 / 3
    assert (tmp_path / "p" / "kcurve_grounding.png").is_file()




def test_a_head_lasso_group_owns_exactly_that_heads_output():
    """Zeroing one head's group (q, k, v rows and biases, o_proj columns; what the lasso shrinks and the pruner
    zeroes) gives the logits of zero-ablating that head with the product's Ablator: the group is the head, no more, no
    less."""
    from vrh_lmms.base.heads import HeadRef
    from vrh_lmms.model.ablation import Ablator

    tok, _, _, turns = _encoders()
    ids = torch.tensor([turns.encode(["copy", "a", "b", "c"], ["a", "b", "c"], has_image=False).ids])
    ablated, zeroed = build_model(MICRO, tok, seed=0), build_model(MICRO, tok, seed=0)
    Ablator(ablated).apply([HeadRef(1, 2)])
    (layer, head, attn, rows), = [g for g in head_groups(zeroed, (1,)) if g[1] == 2]
    with torch.no_grad():
        for p in head_params(attn, rows):
            p.zero_()
        reference, ours = ablated(input_ids=ids).logits, zeroed(input_ids=ids).logits
    assert (layer, head) == (1, 2) and torch.allclose(reference, ours, atol=1e-6)
    assert not torch.allclose(ours, build_model(MICRO, tok, seed=0)(input_ids=ids).logits, atol=1e-4)
    assert group_norms(head_groups(zeroed, (1,)))[2].item() == 0.0
    with pytest.raises(ValueError, match=r"head_lasso_layers \[5\]"):
        head_groups(zeroed, (5,), "head_lasso_layers")


def test_head_lasso_proximal_step_soft_thresholds_each_head():
    """prox_step shrinks every chosen head's norm by exactly `shrink` (a head below it lands on zero) and leaves
    other layers alone; the weight ramps in linearly."""
    assert [lasso_weight(1.0, s, 2, 5) for s in (0, 1, 2, 3, 5, 9)] == [0, 0, 0.25, 0.5, 1.0, 1.0]
    model = build_model(MICRO, make_tokenizer(), seed=0)
    layer1, layer0 = head_groups(model, (1,)), head_groups(model, (0,))
    before1, before0 = group_norms(layer1).detach(), group_norms(layer0).detach()
    prox_step(layer1, 0.5)
    assert torch.allclose(group_norms(layer1).detach(), before1 - 0.5, atol=1e-5)
    assert torch.equal(group_norms(layer0).detach(), before0)
    prox_step(layer1, float(before1.max()) + 1)
    assert group_norms(layer1).detach().abs().max().item() == 0.0


def test_head_lasso_in_training_shrinks_only_its_layers(tmp_path):
    """The lasso as the trainer's phase hook: its layer shrinks, the other moves by training's noise alone, the text
    phase is untouched, and each joint record counts the idle heads."""
    base = replace(MICRO, head_drop=0.0, text_phases=((2, (), 0),), align_steps=2, joint_steps=8, lm_lr=3e-3)
    train(base, tmp_path / "a", seed=0, log=lambda s: None)
    run = train(with_lasso(base, head_lasso=50.0, head_lasso_layers=(1,)), tmp_path / "b", seed=0, log=lambda s: None)
    joint = [rec["phase"] == "joint" for rec in run["history"]]
    assert any(joint) and [("lasso_idle_heads" in rec) for rec in run["history"]] == joint
    norms = {}
    for run in ("a", "b"):
        model = build_model(base, make_tokenizer(), seed=0)
        model.load_state_dict(checkpoint_state(tmp_path / run))
        norms[run] = [group_norms(head_groups(model, (i,))).sum().item() for i in (0, 1)]
    assert norms["b"][1] < 0.9 * norms["a"][1]  # layer 1 shrank under the penalty
    assert abs(norms["b"][0] - norms["a"][0]) < 0.02 * norms["a"][0]  # layer 0 moved only by training's noise
    text_a, text_b = (checkpoint_state(tmp_path / run / "phases" / "text0") for run in ("a", "b"))
    assert all(torch.equal(text_a[k], text_b[k]) for k in text_a)  # the lasso is a joint-phase regulariser only
