"""The shipped demo model's design, p21 (vrh_lmms/assets/demo_model/MODEL_CARD.md), spelled out in full.

`vrh-lmms train-tiny` trains the designs named here. p21 is the last of a line of research designs (p1-p20 in
research/designs.py, each a change to an earlier one; docs/demo-model-experiments.md says what each measured);
research/designs.py derives p21 from that line and a test checks that it equals this one and the shipped model's
recorded design.
"""

from __future__ import annotations

from dataclasses import replace

from research.demo_model.train import Design
from vrh_lmms.base.synth.demo_spec import DemoSpec

PALETTE = ("red", "green", "blue", "yellow", "white", "purple")
SHAPES = ("circle", "square", "triangle", "cross", "diamond")
# 168 px = 6 x 6 image tokens of 28 px; every object fills one token cell; 3-6 objects, every distractor sharing the
# referent's colour or shape; a smooth colour ramp encodes (x, y) in every pixel.
SCENE = dict(position_tint=64, tint_headroom=True, min_objects=3, max_objects=6, grid_cell=28,
             conjunctive_share=1.0, colours=PALETTE, shapes=SHAPES)
TEXT_6x16 = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=6, num_attention_heads=16,
                 num_key_value_heads=16)
VISION = dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=4, fullatt_block_indexes=[0, 1],
              window_size=112)

P21 = Design(
    name="p21",
    # the request before the image (image-first grounding plateaued at 5.5% Acc@0.5)
    spec=DemoSpec(image_size=168, coord_bin=4, scene=SCENE, prompt_first=True),
    text=TEXT_6x16, vision=VISION,
    # rope theta 1e4: with 8-dim heads only two rotary pairs carry text position, and theta 1e6 makes the second one
    # too slow to tell offset 1 from offset 7, which previous-token (induction) heads need
    rope_theta=1e4,
    # text pretraining: recall alone (2 -> 8 pairs over 1000 steps, 8 practice queries per example), then every text
    # task with recall answers restating the key (`kq vq`)
    task_weights=dict(recall=2.0, records=2.0), text_config=dict(recall_practice=8),
    text_phases=((3000, ("recall",), 1000), (2000, (), 0, {"recall_restate": True})),
    # vision + projector aligned to the frozen backbone, then joint training with a third of the batches text, on a
    # scene curriculum (one object, then two or three, then the spec's 3-6)
    align_steps=1000, joint_steps=6000,
    curriculum=((500, {"min_objects": 1, "max_objects": 1}), (2000, {"min_objects": 2, "max_objects": 3})),
    # head dropout 0.05 on layers 0-2 from joint step 3000 (once grounding has formed), and among the survivors of
    # layers 3-5 once their pruning has ended (joint 4750), so the few readers left are redundant with one another
    head_drop=0.05, head_drop_layers=(0, 1, 2), head_drop_kinds=("joint",), head_drop_from=3000,
    head_drop_late_layers=(3, 4, 5), head_drop_late_from=4750,
    # importance-based pruning (research/demo_model/head_prune.py) over joint steps 4250-4750: layers 3-5 down to
    # the six
    # survivors of p17 seed 0 (a backbone's idle heads come with it, as a 7B LLM's do), layer 2 to 4 of its 16 heads
    # by its own ranking, so the scorer's first heads are the causal ones at a k small enough for random draws to
    # stay cheap
    head_prune_layers=(3, 4, 5), head_prune_keep=6, head_prune_steps=(4250, 4750),
    head_prune_survivors=("L3H1", "L4H5", "L4H12", "L4H14", "L5H0", "L5H5"),
    head_prune_extra=(((2,), 4),),
)

DESIGNS: dict[str, Design] = {P21.name: P21}
# the shipped demo model's design (its seeds in docs/demo-model-experiments.md)
LATEST = "p21"


def get_design(name: str, **overrides) -> Design:
    if name not in DESIGNS:
        raise KeyError(f"unknown design {name!r}; known: {', '.join(DESIGNS)}")
    return replace(DESIGNS[name], **{k: v for k, v in overrides.items() if v is not None})
