"""The demo trainer: backend-identical inputs, correct synthetic tasks, loss goes down, and seeds fix everything."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from research.demo_model import run_state
from research.demo_model.data import FastEncoder, backend_inputs
from research.demo_model.evaluation import held_out_scenes
from research.demo_model.model_heads import group_norms, head_groups
from research.demo_model.sequences import TurnEncoder, collate
from research.demo_model.train import Design, checkpoint_state, load_backbone, load_demo_model, make_tokenizer, train
from research.demo_model.visual_tasks import VISUAL_TASKS, ground, questions, unique_referents, vqa
from research.head_lasso import with_lasso
from vrh_lmms.base.synth.demo_spec import DemoSpec
from vrh_lmms.base.synth.text_tasks import TEXT_TASKS, TextTaskConfig, make_example
from vrh_lmms.model.tiny import qwen2_5_vl as tiny

SCENE = dict(position_tint=64, tint_headroom=True, min_objects=3, max_objects=5, grid_cell=28,
             conjunctive_share=1.0, colours=("red", "green", "blue"), shapes=("circle", "square"))
SPEC = DemoSpec(image_size=84, coord_bin=4, scene=SCENE)
MICRO = Design(
    name="micro", spec=SPEC,
    text=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4),
    vision=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, fullatt_block_indexes=[0]),
    text_phases=((4, ("recall", "copy"), 2), (2, (), 0)), align_steps=4, joint_steps=6, text_batch=8, vis_batch=8,
    lr=3e-3, warmup=2, eval_every=6, eval_n=8, head_drop=0.05,
)


def _encoders(spec=SPEC):
    tok = make_tokenizer()
    proc = tiny.make_processor(tok, min_pixels=spec.pixels, max_pixels=spec.pixels)
    encoder = FastEncoder(proc, spec, held_out_scenes(spec, 1)[0])
    return tok, proc, encoder, TurnEncoder(tok, int(encoder.grid_thw.prod()) // 4, spec.prompt_first)


@pytest.mark.parametrize("prompt_first", [False, True], ids=["image_first", "prompt_first"])
def test_grounding_turns_are_what_the_backend_feeds(prompt_first):
    """A grounding question encodes to the ids lmms-eval's qwen2_5_vl backend builds (chat template, image pads),
    with the image first or, as `image_position=after_prompt` feeds it, after the prompt."""
    spec = replace(SPEC, prompt_first=prompt_first)
    tok, proc, encoder, turns = _encoders(spec)
    for scene in held_out_scenes(spec, 4):
        q = ground(scene, scene.target, spec)
        enc = turns.encode(q.prompt, q.answer, has_image=True)
        ref = backend_inputs(proc, [scene], spec)["input_ids"][0].tolist()
        image_at = ref.index(turns.image_id)
        assert (image_at > turns.prompt_offset(True)) == prompt_first
        assert enc.ids[: enc.answer_start] == ref
        assert tok.convert_ids_to_tokens(enc.ids[enc.answer_start:])[-1] == tok.eos_token


def test_text_turns_render_the_chat_template():
    tok, _, _, turns = _encoders()
    ex = make_example("recall", np.random.default_rng(0), TextTaskConfig(), 3)
    enc = turns.encode(ex.prompt, ex.answer, has_image=False)
    msgs = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": [{"type": "text", "text": " ".join(ex.prompt)}]}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert enc.ids[: enc.answer_start] == tok(text, add_special_tokens=False)["input_ids"]
    off = turns.prompt_offset(False)
    assert [enc.ids[off + t] for t in ex.targets] == turns.words([ex.prompt[t] for t in ex.targets])


@pytest.mark.parametrize("seed", range(5))
def test_text_tasks_answer_what_they_ask(seed):
    rng = np.random.default_rng(seed)
    cfg = TextTaskConfig()
    for task in TEXT_TASKS:
        ex = make_example(task, rng, cfg)
        p = ex.prompt
        if task == "recall":
            key = p[-2]
            i = p.index(key)  # the key's first occurrence is in the list
            assert ex.answer == [p[i + 1]] and ex.targets == [i, i + 1]
        elif task == "records":
            colour, shape = p[p.index("locate") + 2: p.index("locate") + 4]
            i = next(j for j in range(2, len(p) - 3) if p[j:j + 2] == [colour, shape])
            x, y = int(p[i + 2]), int(p[i + 3])
            assert ex.answer == ["[", str(x), ",", str(y), ",", str(x + 28), ",", str(y + 28), "]"]
            assert ex.targets == [i, i + 1, i + 2, i + 3]
            descriptions = [tuple(p[j:j + 2]) for j in range(2, p.index("."), 5)]
            assert len(set(descriptions)) == len(descriptions)
        elif task == "copy":
            assert ex.answer == p[2:]
        elif task == "sort":
            assert ex.answer == [str(v) for v in sorted(map(int, p[2:]))]
        elif task == "count":
            assert ex.answer == [str(p[3:].count(p[1]))]
        elif task == "add":
            assert ex.answer == [str(int(p[1]) + int(p[3]))]


def test_visual_questions_are_true_of_the_scene():
    rng = np.random.default_rng(0)
    for scene in held_out_scenes(SPEC, 20):
        for task in VISUAL_TASKS[1:]:
            q = vqa(scene, task, rng, SPEC)
            if q is None:
                continue
            words = q.prompt.split()
            if task == "colour":
                assert scene.objects[q.target].shape == words[-2] and q.answer == [scene.objects[q.target].colour]
            elif task == "shape":
                assert scene.objects[q.target].colour == words[-3] and q.answer == [scene.objects[q.target].shape]
            elif task == "count":
                attr = words[2]
                n = sum(attr in (o.colour, o.shape) for o in scene.objects)
                assert q.answer == [str(n)]
            elif task == "exists":
                c, s = words[3], words[4]
                assert q.answer == ["yes" if any((o.colour, o.shape) == (c, s) for o in scene.objects) else "no"]
        qs = questions(scene, rng, SPEC, 3, vqa_share=0.0)
        assert all(q.task == "ground" for q in qs)
        assert len({q.target for q in qs}) == min(3, len(unique_referents(scene)))


def test_collate_marks_exactly_the_answer_tokens():
    tok, _, _, turns = _encoders()
    a = turns.encode(["copy", ":", "1", "2"], ["1", "2"], False)
    b = turns.encode(["add", "3", "+", "4", "="], ["7"], False)
    batch = collate([a, b], tok.pad_token_id)
    assert batch["input_ids"].shape == (2, max(len(a.ids), len(b.ids)))
    got = [(int(r), int(p)) for r, p in zip(batch["loss_rows"], batch["loss_pos"])]
    assert got == [(0, p - 1) for p in range(a.answer_start, len(a.ids))] + \
        [(1, p - 1) for p in range(b.answer_start, len(b.ids))]
    assert batch["targets"].tolist() == a.ids[a.answer_start:] + b.ids[b.answer_start:]


def test_training_reduces_loss_and_is_deterministic(tmp_path):
    a = train(MICRO, tmp_path / "a", seed=3, log=lambda s: None)
    b = train(MICRO, tmp_path / "b", seed=3, log=lambda s: None)
    assert [h["loss"] for h in a["history"]] == [h["loss"] for h in b["history"]]
    assert [h["phase"] for h in a["history"]] == ["text0", "text1", "align", "joint"]
    from safetensors.torch import load_file

    wa, wb = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    for rel in ("demo_spec.json", "tokenizer_config.json", "backbone/model.safetensors", "train_design.json"):
        assert (tmp_path / "a" / rel).exists(), rel
    longer = train(replace(MICRO, text_phases=((40, (), 0),), align_steps=0, joint_steps=0, eval_every=40),
                   tmp_path / "c",
                   seed=3, log=lambda s: None)
    assert longer["history"][-1]["loss"] < a["history"][0]["loss"]


def test_align_phase_leaves_the_backbone_untouched(tmp_path):
    """Frozen backbone in `align`: only vision weights move; a shared backbone loads into another vision seed."""
    train(replace(MICRO, align_steps=0, joint_steps=0), tmp_path / "t", seed=1, log=lambda s: None)
    back = tmp_path / "t" / "backbone"
    train(replace(MICRO, joint_steps=0), tmp_path / "v", seed=1, backbone=back, vision_seed=7, log=lambda s: None)
    before, after = checkpoint_state(back), checkpoint_state(tmp_path / "v")
    moved = [k for k in after if not torch.equal(before[k], after[k])]
    assert moved and all(k.startswith("model.visual.") for k in moved)
    from research.demo_model.train import build_model

    other = build_model(MICRO, make_tokenizer(), seed=0)
    load_backbone(other, back)
    assert torch.equal(other.lm_head.weight, before["lm_head.weight"])
    with pytest.raises(ValueError, match="does not match"):
        load_backbone(build_model(replace(MICRO, text={**MICRO.text, "num_hidden_layers": 3}), make_tokenizer(), 0),
                      back)


def test_continuing_after_a_phase_equals_the_uninterrupted_run(tmp_path):
    """Every phase starts a fresh optimizer and data are functions of (seed, phase, step): a run continued from
    the checkpoint saved after `text0` ends with bit-identical weights."""
    from safetensors.torch import load_file

    restate = {"recall_restate": True}
    design = replace(MICRO, head_drop=0.0, text_phases=((4, ("recall", "copy"), 2), (2, (), 0, restate)))
    train(design, tmp_path / "full", seed=2, log=lambda s: None)
    train(design, tmp_path / "cont", seed=2, init=tmp_path / "full" / "phases" / "text0", after="text0",
          log=lambda s: None)
    wa, wb = load_file(tmp_path / "full" / "model.safetensors"), load_file(tmp_path / "cont" / "model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    # every phase checkpoint and the backbone load on their own, with the text settings they were trained with
    from research.protocol import trained_text_config

    for folder in ("phases/text0", "phases/joint", "backbone"):
        model, _, spec = load_demo_model(tmp_path / "full" / folder)
        assert spec == DemoSpec.load(tmp_path / "full") and model.config.text_config.num_hidden_layers == 2
    assert not trained_text_config(tmp_path / "full" / "phases" / "text0").recall_restate
    assert trained_text_config(tmp_path / "full" / "backbone").recall_restate
    assert trained_text_config(tmp_path / "full").recall_restate
    with pytest.raises(ValueError, match="must name a phase"):
        train(design, tmp_path / "bad", seed=2, init=tmp_path / "full", after="nosuch", log=lambda s: None)


def test_curriculum_follows_the_visual_steps_through_align_and_joint(tmp_path, monkeypatch):
    """The curriculum clock counts align steps, then joint steps; the data stream's offset index (1e6 x phase)
    must not be mistaken for it (it was: every phased run trained on the full scenes from step 0)."""
    from research.demo_model import train as train_mod

    seen: list[tuple[int, int]] = []
    real = train_mod.train_scene

    def spy(seed, step, i, spec):
        scene = real(seed, step, i, spec)
        if i == 0:
            seen.append((step // 1_000_000, spec.scene_config().max_objects))
        return scene

    monkeypatch.setattr(train_mod, "train_scene", spy)
    one = {"min_objects": 1, "max_objects": 1}
    design = replace(MICRO, head_drop=0.0, text_phases=((2, (), 0),), align_steps=3, joint_steps=4, text_share=0.0,
                     curriculum=((5, one),), eval_every=100)
    train(design, tmp_path / "c", seed=0, log=lambda s: None)
    # phase index 1 = align (visual steps 0-2), 2 = joint (visual steps 3-6): one object until visual step 5
    assert seen == [(1, 1), (1, 1), (1, 1), (2, 1), (2, 1), (2, 5), (2, 5)]
    assert design.visual_step("align", 2) == 2 and design.visual_step("joint", 2) == 5


def test_answers_are_scored_against_the_referent_and_every_object():
    """`localised` counts boxes on any object, so a model that finds objects but not the referent is told apart."""
    from research.demo_model.evaluation import score_answers

    scene = next(s for s in held_out_scenes(SPEC, 20) if len(s.objects) >= 3)
    other = next(o for i, o in enumerate(scene.objects) if i != scene.target)
    box = lambda b: "[ {} , {} , {} , {} ]".format(*(int(v) for v in (b[0], b[1], b[0] + b[2], b[1] + b[3])))  # noqa: E731
    empty = [0, 0, 1, 1]  # no object covers a 1-pixel box
    res = score_answers([box(scene.target_object.bbox), box(other.bbox), box(empty), "no box"], [scene] * 4)
    assert res.correct.tolist() == [True, False, False, False]
    assert res.on_object.tolist() == [True, True, False, False]
    assert res.parse_fail.tolist() == [False, False, False, True]
    assert res.localised == 0.5 and res.acc50 == 0.25


def test_joint_phase_can_keep_the_backbone_attention_frozen(tmp_path):
    """`joint_frozen=("self_attn.",)`: after the joint phase every text attention weight equals the align phase's,
    while the MLPs and the vision tower moved."""
    design = replace(MICRO, head_drop=0.0, text_phases=((2, (), 0),), align_steps=2, joint_steps=3,
                     joint_frozen=("self_attn.",))
    train(design, tmp_path / "f", seed=0, log=lambda s: None)
    before, after = checkpoint_state(tmp_path / "f" / "phases" / "align"), checkpoint_state(tmp_path / "f")
    attn = [k for k in after if "self_attn." in k and not k.startswith("model.visual.")]
    mlp = [k for k in after if ".mlp." in k and not k.startswith("model.visual.")]
    vis = [k for k in after if k.startswith("model.visual.")]
    assert attn and all(torch.equal(before[k], after[k]) for k in attn)
    assert any(not torch.equal(before[k], after[k]) for k in mlp)
    assert any(not torch.equal(before[k], after[k]) for k in vis)


def test_head_dropout_hits_only_the_chosen_layers():
    """`head_drop_layers=(1,)` with p = 1 zeroes every head output of layer 1 before o_proj and none of layer 0;
    inactive, it changes nothing; a layer the model lacks is refused by name."""
    from research.demo_model.model_heads import text_layers
    from research.demo_model.train import HeadDrop, build_model

    tok, _, _, turns = _encoders()
    model = build_model(MICRO, tok, seed=0)
    drop = HeadDrop(model, 1.0, torch.Generator().manual_seed(0), layers=(1,))
    seen: dict[int, torch.Tensor] = {}
    for i, layer in enumerate(text_layers(model)):
        layer.self_attn.o_proj.register_forward_pre_hook(lambda m, args, i=i: seen.__setitem__(i, args[0]))
    ids = torch.tensor([turns.encode(["copy", "a", "b"], ["a", "b"], has_image=False).ids])
    drop.active = True
    model(input_ids=ids)
    assert seen[0].abs().sum() > 0 and seen[1].abs().sum() == 0
    drop.active = False
    model(input_ids=ids)
    assert seen[1].abs().sum() > 0
    with pytest.raises(ValueError, match=r"head_drop_layers \[2\]"):
        HeadDrop(model, 0.05, torch.Generator(), layers=(0, 2))


def test_head_dropout_applies_only_in_the_chosen_phases(tmp_path):
    """`head_drop_kinds=("joint",)`: the align phase ends bit-equal to the run without dropout, the joint phase not."""
    base = replace(MICRO, head_drop=0.0, text_phases=((2, (), 0),), align_steps=2, joint_steps=3)
    train(base, tmp_path / "a", seed=0, log=lambda s: None)
    train(replace(base, head_drop=0.5, head_drop_kinds=("joint",)), tmp_path / "b", seed=0, log=lambda s: None)
    align = [checkpoint_state(tmp_path / run / "phases" / "align") for run in ("a", "b")]
    end = [checkpoint_state(tmp_path / run) for run in ("a", "b")]
    assert all(torch.equal(align[0][k], align[1][k]) for k in align[0])
    assert any(not torch.equal(end[0][k], end[1][k]) for k in end[0])


def test_head_dropout_starts_at_head_drop_from(tmp_path):
    """`head_drop_from` = the phase's length leaves the run bit-equal to one without dropout; one step earlier it
    does not (the last step drops heads), so the start step is where dropout begins, not before or after."""
    base = replace(MICRO, head_drop=0.0, text_phases=((2, (), 0),), align_steps=2, joint_steps=3)
    train(base, tmp_path / "a", seed=0, log=lambda s: None)
    late = replace(base, head_drop=0.5, head_drop_kinds=("joint",))
    train(replace(late, head_drop_from=3), tmp_path / "b", seed=0, log=lambda s: None)
    train(replace(late, head_drop_from=2), tmp_path / "c", seed=0, log=lambda s: None)
    end = {run: checkpoint_state(tmp_path / run) for run in ("a", "b", "c")}
    assert all(torch.equal(end["a"][k], end["b"][k]) for k in end["a"])
    assert any(not torch.equal(end["a"][k], end["c"][k]) for k in end["a"])


def test_late_head_dropout_starts_at_its_own_step(tmp_path):
    """`head_drop_late_layers` start at `head_drop_late_from`: at the phase's length the run is bit-equal to the one
    without them (their hooks draw nothing from the generator while off, so the early layers' masks are the same);
    one step earlier the last step drops heads of layer 1 too, and the run differs."""
    base = replace(MICRO, head_drop=0.5, head_drop_kinds=("joint",), head_drop_layers=(0,), text_phases=((2, (), 0),),
                   align_steps=2, joint_steps=3)
    train(base, tmp_path / "a", seed=0, log=lambda s: None)
    late = replace(base, head_drop_late_layers=(1,))
    train(replace(late, head_drop_late_from=3), tmp_path / "b", seed=0, log=lambda s: None)
    train(replace(late, head_drop_late_from=2), tmp_path / "c", seed=0, log=lambda s: None)
    end = {run: checkpoint_state(tmp_path / run) for run in ("a", "b", "c")}
    assert all(torch.equal(end["a"][k], end["b"][k]) for k in end["a"])
    assert any(not torch.equal(end["a"][k], end["c"][k]) for k in end["a"])


def test_late_head_dropout_refuses_a_layer_named_twice():
    from research.demo_model.train import HeadDrop, build_model

    tok, _, _, _ = _encoders()
    model = build_model(MICRO, tok, seed=0)
    with pytest.raises(ValueError, match=r"head_drop_late_layers \[1\] are also in head_drop_layers"):
        HeadDrop(model, 0.05, torch.Generator(), layers=(0, 1), late_layers=(1,))
    with pytest.raises(ValueError, match="need head_drop_layers"):
        HeadDrop(model, 0.05, torch.Generator(), layers=(), late_layers=(1,))


def test_kept_state_is_the_state_at_its_step_and_resumes_there(tmp_path):
    """`keep_states=["joint:2"]` keeps the resume state saved at joint step 2; copied into a fresh folder as the resume
    state, it continues to the same end as the uninterrupted run. Points that are no evaluation are refused."""
    import shutil

    from research.demo_model import run_state

    design = replace(MICRO, head_drop=0.0, text_phases=((2, (), 0),), align_steps=2, joint_steps=4, eval_every=2)
    train(design, tmp_path / "a", seed=0, keep_states=["joint:2"], log=lambda s: None)
    kept = run_state.kept_path(tmp_path / "a", "joint", 2)
    state = torch.load(kept, weights_only=True)  # a saved state is plain tensors and data
    assert (state["phase"], state["step"]) == ("joint", 2)
    assert not run_state.resume_path(tmp_path / "a").exists()  # the run ended; the kept copy stays
    (tmp_path / "b").mkdir()
    shutil.copy(kept, run_state.resume_path(tmp_path / "b"))
    shutil.copy(tmp_path / "a" / "train_log.jsonl", tmp_path / "b" / "train_log.jsonl")
    train(design, tmp_path / "b", seed=0, resume=True, log=lambda s: None)
    a, b = checkpoint_state(tmp_path / "a"), checkpoint_state(tmp_path / "b")
    assert all(torch.equal(a[k], b[k]) for k in a)
    for bad, why in (("joint:3", "every 2 steps"), ("join:2", "PHASE one of"), ("joint", "PHASE:STEP")):
        with pytest.raises(ValueError, match=why):
            train(design, tmp_path / "c", seed=0, keep_states=[bad], log=lambda s: None)
    assert not (tmp_path / "c").exists()  # refused before the output folder is made


class _Killed(Exception):
    pass


def test_a_killed_run_resumes_bit_equal_to_the_uninterrupted_one(tmp_path, monkeypatch):
    """Kill a run right after its evaluation at joint step 2 (mid-phase, with head dropout, a phase hook (the research
    lasso) and the head pruner live, so the optimizer, the dropout generator, the hook's state and the measured head
    importance matter), resume it and kill it again after its last evaluation (the phase's end, before the run's end):
    the lasso's reference norm is still the joint phase's starting median, not the resumed weights'; the final
    weights and every logged figure but the clock equal the run that was never stopped; and a call without `resume`
    refuses to overwrite the unfinished run."""
    from research.demo_model import head_prune

    monkeypatch.setattr(head_prune, "WINDOW", 4)
    design = with_lasso(MICRO, head_drop=0.5, head_drop_kinds=("joint",), head_lasso=5.0, head_lasso_steps=(0, 1),
                        head_prune_layers=(0,), head_prune_keep=1, head_prune_steps=(2, 3),
                        text_phases=((2, (), 0),), align_steps=2, joint_steps=4, eval_every=2)
    whole = train(design, tmp_path / "whole", seed=0, log=lambda s: None)

    def kill_at_joint_2(line: str) -> None:
        if "phase joint step 2 " in line:
            raise _Killed

    with pytest.raises(_Killed):
        train(design, tmp_path / "cut", seed=0, log=kill_at_joint_2)
    with pytest.raises(FileExistsError, match="unfinished run"):
        train(design, tmp_path / "cut", seed=0, log=lambda s: None)
    def kill_at_joint_4(line: str) -> None:
        if "phase joint step 4 " in line:
            raise _Killed

    with pytest.raises(_Killed):
        train(design, tmp_path / "cut", seed=0, resume=True, log=kill_at_joint_4)
    aligned, _, _ = load_demo_model(tmp_path / "cut" / "phases" / "align")
    start_median = float(group_norms(head_groups(aligned)).median())
    hooks = run_state.load_state(tmp_path / "cut").hooks
    assert len(hooks) == 1 and hooks[0]["lasso_start"] == pytest.approx(start_median, rel=1e-6)
    lines = []
    resumed = train(design, tmp_path / "cut", seed=0, resume=True, log=lines.append)
    assert "resuming joint at step 4" in lines[0]
    a, b = checkpoint_state(tmp_path / "whole"), checkpoint_state(tmp_path / "cut")
    assert all(torch.equal(a[k], b[k]) for k in a)

    def no_clock(run):
        return [{k: v for k, v in rec.items() if k != "seconds"} for rec in run["history"]]

    assert no_clock(whole) == no_clock(resumed)
    assert not (tmp_path / "cut" / "resume_state.pt").exists()
    logged = (tmp_path / "cut" / "train_log.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in logged] == [r["step"] for r in whole["history"]]


def test_resume_without_an_unfinished_run_names_the_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="no unfinished run"):
        train(MICRO, tmp_path / "empty", seed=0, resume=True, log=lambda s: None)
