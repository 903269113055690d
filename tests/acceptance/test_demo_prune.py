"""Importance-based head pruning in the demo trainer (research/demo_model/head_prune.py): the importance is the loss's
derivative by each head's output gate (checked against finite differences), the schedule prunes exactly the heads it
says in the layers it names, measuring alone changes nothing, and a resumed run keeps what was measured."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from test_demo_train import MICRO, _encoders

from research.demo_model import head_prune
from research.demo_model.model_heads import group_norms, head_groups
from research.demo_model.train import (
    BatchMaker,
    Design,
    answer_logits,
    build_model,
    checkpoint_state,
    make_pruners,
    make_tokenizer,
    train,
)

BASE = replace(MICRO, head_drop=0.0, text_phases=((2, (), 0),), align_steps=2, joint_steps=6, eval_every=3)


def test_pruned_count_ramps_linearly_to_all_but_keep():
    counts = [head_prune.pruned_count(s, total=10, keep=2, start=3, end=6) for s in range(9)]
    assert counts == [0, 0, 0, 2, 4, 6, 8, 8, 8]
    assert head_prune.pruned_count(5, total=10, keep=2, start=5, end=5) == 8


def test_head_importance_is_the_loss_derivative_by_each_heads_output_gate():
    """Per sample b and head h, dL/d xi_{b,h} for a gate scaling that head's output in that sample, by central
    finite differences on a float64 model; the importance is its absolute value averaged over samples."""
    tok, _, encoder, turns = _encoders()
    model = build_model(MICRO, tok, seed=0).double()
    batch = BatchMaker(MICRO, turns, encoder, seed=0).text(0, 4, batch=6)
    pruner = head_prune.HeadPruner(model, (1,), keep=1, steps=(head_prune.WINDOW, head_prune.WINDOW))
    pruner.measure(0)
    torch.nn.functional.cross_entropy(answer_logits(model, batch), batch["targets"]).backward()
    pruner.update()
    measured = pruner.importance / (1 - head_prune.DECAY)

    attn = model.model.language_model.layers[1].self_attn
    hd, n_heads = attn.head_dim, 4

    def loss_with(sample: int, head: int, scale: float) -> float:
        def hook(module, args):
            x = args[0].clone()
            x[sample, :, head * hd:(head + 1) * hd] *= scale
            return (x,)

        handle = attn.o_proj.register_forward_pre_hook(hook)
        with torch.no_grad():
            value = torch.nn.functional.cross_entropy(answer_logits(model, batch), batch["targets"]).item()
        handle.remove()
        return value

    eps = 1e-3  # the loss carries ~1e-9 of float32 noise (rotary tables) even in float64: smaller steps amplify it
    reference = torch.tensor([
        sum(abs(loss_with(b, h, 1 + eps) - loss_with(b, h, 1 - eps)) / (2 * eps) for b in range(6)) / 6
        for h in range(n_heads)], dtype=torch.float64)
    assert reference.max() > 0
    assert torch.allclose(measured, reference, rtol=2e-3, atol=1e-8)


def test_pruning_zeroes_the_scheduled_heads_of_its_layers_only(tmp_path, monkeypatch):
    """keep 1 of layer 1's 4 heads: three end with zero parameters (q, k, v, o_proj columns), layer 0 keeps all;
    the text phases are untouched; the pruned heads are the ones the log names."""
    monkeypatch.setattr(head_prune, "WINDOW", 2)
    train(BASE, tmp_path / "a", seed=0, log=lambda s: None)
    run = train(replace(BASE, head_prune_layers=(1,), head_prune_keep=1, head_prune_steps=(2, 4)), tmp_path / "b",
                seed=0, log=lambda s: None)
    model = build_model(BASE, make_tokenizer(), seed=0)
    model.load_state_dict(checkpoint_state(tmp_path / "b"))
    norms1 = group_norms(head_groups(model, (1,)))
    norms0 = group_norms(head_groups(model, (0,)))
    assert int((norms1 == 0).sum()) == 3 and bool((norms0 > 0).all())
    dead = {f"L1H{h}" for h in range(4) if norms1[h] == 0}
    assert set(run["history"][-1]["pruned_heads"]) == dead
    text_a, text_b = (checkpoint_state(tmp_path / r / "phases" / "text0") for r in ("a", "b"))
    assert all(torch.equal(text_a[k], text_b[k]) for k in text_a)


def _live_heads(folder, layer: int) -> list[str]:
    model = build_model(BASE, make_tokenizer(), seed=0)
    model.load_state_dict(checkpoint_state(folder))
    norms = group_norms(head_groups(model, (layer,)))
    return [f"L{layer}H{h}" for h in range(len(norms)) if norms[h] > 0]


def test_named_survivors_are_the_heads_left(tmp_path, monkeypatch):
    """head_prune_survivors (a shared backbone's mask): the heads left are the named ones whatever their importance,
    and the others are pruned on the same schedule; the run without them keeps another head here."""
    monkeypatch.setattr(head_prune, "WINDOW", 2)
    design = replace(BASE, head_prune_layers=(1,), head_prune_keep=1, head_prune_steps=(2, 4))
    free = train(design, tmp_path / "free", seed=0, log=lambda s: None)["history"][-1]["pruned_heads"]
    kept_free = ({f"L1H{h}" for h in range(4)} - set(free)).pop()
    chosen = next(f"L1H{h}" for h in range(4) if f"L1H{h}" != kept_free)
    run = train(replace(design, head_prune_survivors=(chosen,)), tmp_path / "mask", seed=0, log=lambda s: None)
    assert sorted(run["history"][-1]["pruned_heads"]) == sorted({f"L1H{h}" for h in range(4)} - {chosen})
    assert _live_heads(tmp_path / "mask", 1) == [chosen]


def test_measuring_importance_alone_leaves_training_bit_equal(tmp_path, monkeypatch):
    """The gates multiply by exactly one: a run that measures every joint step but prunes only after the phase ends
    equals the run without a pruner, weight for weight."""
    monkeypatch.setattr(head_prune, "WINDOW", BASE.joint_steps)
    train(BASE, tmp_path / "a", seed=0, log=lambda s: None)
    end = BASE.joint_steps
    train(replace(BASE, head_prune_layers=(1,), head_prune_keep=1, head_prune_steps=(end, end)), tmp_path / "b",
          seed=0, log=lambda s: None)
    a, b = checkpoint_state(tmp_path / "a"), checkpoint_state(tmp_path / "b")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_bad_pruning_settings_name_the_option():
    model = build_model(MICRO, make_tokenizer(), seed=0)
    with pytest.raises(ValueError, match="head_prune_keep 9"):
        head_prune.HeadPruner(model, (1,), keep=9, steps=(0, 1))
    with pytest.raises(ValueError, match="head_prune_steps"):
        head_prune.HeadPruner(model, (1,), keep=1, steps=(3, 1))
    with pytest.raises(ValueError, match=r"head_prune_survivors .*not among them: \['L0H1'\]"):
        head_prune.HeadPruner(model, (1,), keep=1, steps=(0, 1), survivors=("L0H1",))
    with pytest.raises(ValueError, match="exactly head_prune_keep = 2"):
        head_prune.HeadPruner(model, (1,), keep=2, steps=(0, 1), survivors=("L1H1",))
    with pytest.raises(ValueError, match=r"head_prune_layers \[4\]"):
        head_prune.HeadPruner(model, (4,), keep=1, steps=(0, 1))


def test_an_extra_group_is_pruned_to_its_own_count(tmp_path, monkeypatch):
    """head_prune_extra: layer 1 kept to 1 head and layer 0 to 2 on one schedule, each group to its own count (zero
    parameters for the rest); the log names the pruned heads of both groups; the design reads back from its JSON."""
    monkeypatch.setattr(head_prune, "WINDOW", 2)
    design = replace(BASE, head_prune_layers=(1,), head_prune_keep=1, head_prune_steps=(2, 4),
                     head_prune_extra=(((0,), 2),))
    run = train(design, tmp_path / "x", seed=0, log=lambda s: None)
    live0, live1 = _live_heads(tmp_path / "x", 0), _live_heads(tmp_path / "x", 1)
    assert len(live0) == 2 and len(live1) == 1
    every = {f"L{layer}H{h}" for layer in (0, 1) for h in range(4)}
    assert set(run["history"][-1]["pruned_heads"]) == every - set(live0) - set(live1)
    read_back = Design.from_dict(json.loads(json.dumps(design.to_dict())))  # as train_design.json holds it
    assert read_back.head_prune_extra == design.head_prune_extra == (((0,), 2),)


def test_a_state_from_before_the_extra_group_resumes_into_it(tmp_path, monkeypatch):
    """Branching (p21 from p19's joint-4000 state): the state kept by the design without the extra group, at a step
    before that group measures, continued under the design with it, ends where the uninterrupted run of that design
    ends, weight for weight."""
    import shutil

    from research.demo_model import run_state

    monkeypatch.setattr(head_prune, "WINDOW", 1)
    main = replace(BASE, head_drop=0.05, head_drop_layers=(0,), head_drop_kinds=("joint",), head_prune_layers=(1,),
                   head_prune_keep=1, head_prune_steps=(4, 5))
    extra = replace(main, head_prune_extra=(((0,), 3),))
    train(main, tmp_path / "main", seed=0, keep_states=["joint:3"], log=lambda s: None)
    train(extra, tmp_path / "whole", seed=0, log=lambda s: None)
    (tmp_path / "branch").mkdir()
    shutil.copy(run_state.kept_path(tmp_path / "main", "joint", 3), run_state.resume_path(tmp_path / "branch"))
    shutil.copy(tmp_path / "main" / "train_log.jsonl", tmp_path / "branch" / "train_log.jsonl")
    train(extra, tmp_path / "branch", seed=0, resume=True, log=lambda s: None)
    whole, branch = checkpoint_state(tmp_path / "whole"), checkpoint_state(tmp_path / "branch")
    assert all(torch.equal(whole[k], branch[k]) for k in whole)
    assert len(_live_heads(tmp_path / "branch", 0)) == 3


def test_bad_extra_groups_name_the_option(tmp_path):
    model = build_model(MICRO, make_tokenizer(), seed=0)
    design = replace(BASE, head_prune_layers=(1,), head_prune_keep=1, head_prune_steps=(0, 1))
    with pytest.raises(ValueError, match=r"head_prune_extra .*group 1: shares \[1\]"):
        make_pruners(model, replace(design, head_prune_extra=(((0, 1), 2),)))
    with pytest.raises(ValueError, match=r"head_prune_extra .*group 1: empty"):
        make_pruners(model, replace(design, head_prune_extra=(((), 2),)))
    with pytest.raises(ValueError, match="head_prune_extra needs head_prune_keep"):
        make_pruners(model, replace(design, head_prune_keep=None, head_prune_extra=(((0,), 2),)))
    with pytest.raises(ValueError, match="head_prune_keep 5"):
        make_pruners(model, replace(design, head_prune_extra=(((0,), 5),)))
    with pytest.raises(ValueError, match=r"group 1: shares \[1\]"):  # before the text and align phases run
        train(replace(design, head_prune_extra=(((1,), 2),)), tmp_path / "run", seed=0, log=lambda s: None)
    assert not (tmp_path / "run").exists()


def test_p18_keeps_exactly_the_shipped_models_survivors():
    """p18's named survivors (p17 seed 0's; research/designs.py) are the heads of layers 3-5 that the shipped model
    (p21 seed 0, which keeps them by design) did not prune, read from the shipped model's own training record and
    config."""
    from research.demo_model.designs import P21
    from research.designs import DESIGNS
    from vrh_lmms.base.heads.geometry import head_name
    from vrh_lmms.base.paths import assets_path

    shipped = assets_path() / "demo_model"
    pruned = set(json.loads((shipped / "train_design.json").read_text())["final"]["pruned_heads"])
    n_heads = json.loads((shipped / "config.json").read_text())["text_config"]["num_attention_heads"]
    design = DESIGNS["p18"]
    heads = {head_name(layer, head) for layer in design.head_prune_layers for head in range(n_heads)}
    assert set(design.head_prune_survivors) == heads - pruned
    assert len(design.head_prune_survivors) == design.head_prune_keep
    assert P21.head_prune_survivors == design.head_prune_survivors

