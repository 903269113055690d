"""The demo model's research designs p1-p21 (docs/demo-model-experiments.md says what each measured), each a change to
an earlier one. p21 shipped (research/demo_model/designs.py spells it out; a test checks that the line below derives the
same design); the others are history, trainable with `python -m research.train --design NAME`.

Earlier designs (a0-a6, t1-t7: one grounding task from scratch, with or without head dropout and group lasso) are
recorded in the experiment log only; their recipe no longer exists in code.
"""

from __future__ import annotations

from dataclasses import replace

from research.demo_model.designs import SCENE, VISION, TEXT_6x16
from research.demo_model.train import Design
from research.head_lasso import with_lasso
from vrh_lmms.base.synth.demo_spec import DemoSpec

# p1: text-pretrained backbone (recall, records, copy, sort, count, add; recall pairs ramped 2 -> 8 over 2000
# steps), then vision + projector aligned to the frozen backbone, then joint training with a third of the batches
# text; image first; no head dropout. Rope theta 1e4: with 8-dim heads only two rotary pairs carry text position,
# and theta 1e6 makes the second one too slow to tell offset 1 from offset 7, which previous-token (induction) heads
# need; image tokens use the h/w sections. Recall examples carry 8 practice queries (multi-query recall).
_P1 = Design(name="p1", spec=DemoSpec(image_size=168, coord_bin=4, scene=SCENE), text=TEXT_6x16, vision=VISION,
             text_phases=((4000, (), 2000),), align_steps=1000, joint_steps=3000, rope_theta=1e4,
             task_weights=dict(recall=2.0, records=2.0), text_config=dict(recall_practice=8))
# p2: recall alone first (3000 steps, 2 -> 8 pairs over 1000), then all text tasks (2000 steps), then as p1.
_P2 = replace(_P1, name="p2", text_phases=((3000, ("recall",), 1000), (2000, (), 0)))
# p3: p2, with recall answers restating the key from the mixed phase on (`kq vq`): the value is then predicted at a
# key token, like the practice queries that recall-first training taught (100/96/89/76% at 2/4/6/8 pairs), where
# the value alone, four tokens after the key, lagged (41% at 8 pairs).
_P3 = replace(_P1, name="p3", text_phases=((3000, ("recall",), 1000), (2000, (), 0, {"recall_restate": True})))

# p4: p3 with the request before the image (`image_position=after_prompt`): image-first grounding stayed at 5.5%
# Acc@0.5 through p3's align phase and the first 1000 joint steps (seed 0), as every image-first design of the first
# approach plateaued, while prompt-first designs learned it (docs/demo-model-experiments.md).
_P4 = replace(_P3, name="p4", spec=replace(_P3.spec, prompt_first=True))

# p5: p4 with the first approach's scene curriculum (one object, then two or three, then the spec's 3-6), which the
# p designs lacked (and which the trainer's curriculum clock could not apply before it counted visual steps), and a
# joint phase of 4000 steps.
_P5 = replace(_P4, name="p5", joint_steps=4000,
              curriculum=((500, {"min_objects": 1, "max_objects": 1}), (2000, {"min_objects": 2, "max_objects": 3})))
# p6: p5 with the backbone at the full rate in the joint phase (t1 trained everything at 2e-3).
_P6 = replace(_P5, name="p6", lm_lr=2e-3)

# p7: p5 with the first approach's middle stage as t1 had it: two or three objects *without* conjunctive distractors
# (each distractor differs from the referent in colour and shape) until visual step 2000. p4 seed 0 finds *an*
# object's cell on 53% of full scenes (81% with one object) but the referent on 7.8% (uniform pick: 25%): it
# localises, it does not select.
_P7 = replace(_P5, name="p7", curriculum=((500, {"min_objects": 1, "max_objects": 1}),
                                           (2000, {"min_objects": 2, "max_objects": 3, "conjunctive_share": 0.0})))

# p8: p5 with the backbone's attention frozen in the joint phase (MLPs, norms, embeddings and the vision tower train).
# p5 seed 0 grounds (89.0%) but reads the box through many redundant later-layer heads (its scorer's top-9 cost 1-13
# points) and one layer-0 head of the backbone (L0H4) alone costs 80.5: a model that may not retrain its attention has
# to route grounding through the heads text pretraining made, as a 7B VLM's fine-tuning largely does.
_P8 = replace(_P5, name="p8", joint_frozen=("self_attn.",))

# p9: p5 with head dropout 0.05 on layers 0-2, in the joint phase only (as a regulariser, <= 0.05). In p5 seed 0, 16
# heads of layers 0-2 each cost >= 5 points alone (L0H4: 80.5), so random masks cost more than the scorer's top ones
# (random-9 40.9, top-9 14.5); the first approach's t7 showed dropout on the early layers alone makes random masks
# harmless while later layers, without it, keep their readers. Its align phase is p5's (same data, no dropout).
_P9 = replace(_P5, name="p9", head_drop=0.05, head_drop_layers=(0, 1, 2), head_drop_kinds=("joint",))

# the late-layer lasso's placement, shared by p11, p12 and p14 (layers 3-5, ramped in over joint steps 1000-2000)
LATE_LASSO = dict(head_lasso_layers=(3, 4, 5), head_lasso_steps=(1000, 2000))

# p11: p9 with a whole-head group lasso on layers 3-5 as a proximal step (weight 25: each head's norm, ~7, shrinks by
# 25 x the backbone's rate per step, ~10 in all), ramped in over joint steps 1000-2000 (after the scene curriculum).
# p5 seed 0 reads the referent through ~25 heads of layers 3-5 (its scorer's top-9 cost 14.5, top-14 56): every free
# head joins the lookup, where a 7B VLM's heads mostly sit idle on any one task. The lasso makes the heads the tasks
# do not need idle (zero output, flat attention), so the readers left should be few and random masks harmless. (p10,
# the same with the lasso as a loss term of weight 1e-3, was stopped at joint 2500: under Adam it moved no head.)
_P11 = with_lasso(_P9, name="p11", head_lasso=25.0, **LATE_LASSO)
# p12: p5 with p11's lasso and no head dropout: with p5, p9 and p11 (same seed, same align checkpoint) a 2 x 2 of
# early-layer dropout x late-layer lasso.
_P12 = with_lasso(_P5, name="p12", head_lasso=25.0, **LATE_LASSO)

# p13: p9 with head dropout on layers 0-1 only. p12 (no dropout) reads the box through a few layer-2 heads (L2H6
# alone costs 75.5), p9's dropout on layers 0-2 spread that reading (top-9 35.0) and slowed grounding (72.5 at the
# end); layers 0-1 are where p5's critical non-reader heads sit (L0H4 alone 80.5), so they keep the regulariser.
_P13 = replace(_P9, name="p13", head_drop_layers=(0, 1))
# p14: p13 with a mild lasso on layers 3-5 (weight 10: ~4 of a head's ~7 norm over the phase, where p11/p12's 25
# took ~10 and pruned every head as its cumulative shrink passed the head's norm): the heads the tasks need can keep
# their norm, the rest are pushed towards idle without a forced fallback onto layers 0-2.
_P14 = with_lasso(_P13, name="p14", head_lasso=10.0, **LATE_LASSO)

# p15: p9 with a joint phase of 6000 steps. On the rebuilt p5 seed 0 align checkpoint dropout slowed grounding (p9
# 25.0% at joint 2500 where p5 stood at 50.8; p13 39.8 and p14 31.2 at joint 4000), while on the earlier one p9 had
# reached 72.5 with random heads nearly harmless (random-9 14.9) and the scorer's top-9 costing 35.0.
_P15 = replace(_P9, name="p15", joint_steps=6000)
# p16: p15 with head dropout from joint step 3000 only, once grounding has formed (p5 clicks between joint 2000 and
# 2500 on both align checkpoints): the regulariser then spreads the early layers' functions over more heads instead
# of slowing the lookup's learning.
_P16 = replace(_P15, name="p16", head_drop_from=3000)

# p17: p16 with importance-based pruning of layers 3-5 (research/demo_model/head_prune.py) down to 6 of their 48
# heads over
# joint steps 4250-4750, importance measured from joint step 4000 on every batch (text and visual). The lasso's outcome
# hung on its weight (25 pruned all of layers 3-5 and moved the readers into layer 2, 10 pruned none); pruning to a
# count keeps the readers where the scorer looks and leaves the other heads of their layers idle, as in a 7B VLM.
# Until joint step 4000 it is p16 (the pruner measures nothing before then), so it continues p16's state at 4000.
_P17 = replace(_P16, name="p17", head_prune_layers=(3, 4, 5), head_prune_keep=6, head_prune_steps=(4250, 4750))

# p18: p17 whose layers 3-5 keep the shipped model's (p17 seed 0's) six survivors: the pruning mask becomes part of
# the shared backbone, as a 7B LLM's idle heads come with its pretraining. p17 seeds 1 and 2 pruned to other survivors
# (one head in common with seed 0 each), so seed 0's top heads were zero in them and transferred nothing (0-9
# points); p18 trains further VLMs on seed 0's backbone and mask, which tests whether the same survivors become the
# readers (transfer) and whether the design holds across vision towers.
_P18 = replace(_P17, name="p18", head_prune_survivors=("L3H1", "L4H5", "L4H12", "L4H14", "L5H0", "L5H5"))

# p19: p18 with head dropout (the same 0.05) on layers 3-5 too once pruning has ended (joint step 4750): there it can
# only hit the six survivors, which each cost 20-50 points alone in p17/p18, so a random k-set that holds one costs
# that much (the shipped model's random-5 mean over 20 draws is 11.5). Dropout among the survivors makes them
# redundant with one another, as a 7B VLM's retrieval heads are. Until joint step 4750 it is p18.
_P19 = replace(_P18, name="p19", head_drop_late_layers=(3, 4, 5), head_drop_late_from=4750)

# p20: p19 with the survivors' dropout from joint step 4500 (during the last half of the pruning): p19 seed 1 kept one
# survivor carrying most of its reading (L4H14, 25 points alone) after 1250 steps of it. Until joint 4500 it is p19.
_P20 = replace(_P19, name="p20", head_drop_late_from=4500)

# p21: p19 with layer 2 pruned too, to 4 of its 16 heads by its own importance ranking, on the same schedule as
# layers 3-5 (measured from joint 4000, pruned over 4250-4750); layer 2's dropout (0.05 from joint 3000) goes on among
# its survivors. p19 seed 1 misses because the scorer ranks layer 2's copies first (L2H9, L2H0: 2.5 and 1.0 points
# alone; its top-3 costs 35.0 where the oracle's costs 55.0) while its random draws cost about k/96 of the heads'
# summed single effects; with layer 2's copies idle the scorer's first heads should be the causal ones, at a k
# small enough for random draws to stay cheap. Until joint step 4000 it is p19 (and p16 for seed 0).
_P21 = replace(_P19, name="p21", head_prune_extra=(((2,), 4),))

DESIGNS: dict[str, Design] = {d.name: d for d in [_P1, _P2, _P3, _P4, _P5, _P6, _P7, _P8, _P9, _P11, _P12, _P13,
                                                   _P14, _P15, _P16, _P17, _P18, _P19, _P20, _P21]}
# the design that shipped (vrh_lmms/assets/demo_model/MODEL_CARD.md; its seeds in docs/demo-model-experiments.md)
LATEST = "p21"


def get_design(name: str, **overrides) -> Design:
    if name not in DESIGNS:
        raise KeyError(f"unknown design {name!r}; known: {', '.join(DESIGNS)}")
    return replace(DESIGNS[name], **{k: v for k, v in overrides.items() if v is not None})
