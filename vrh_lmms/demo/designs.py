"""Named experiment designs (see docs/demo-model-experiments.md for what each measured)."""

from __future__ import annotations

from dataclasses import replace

from vrh_lmms.demo.spec import DemoSpec
from vrh_lmms.demo.train import Design

VISION_SMALL = dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=4, fullatt_block_indexes=[0, 1],
                    window_size=112)
TEXT_4x16 = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=16,
                 num_key_value_heads=16)

_A0 = Design(
    name="a0",
    spec=DemoSpec(image_size=168, coord_bin=4, scene=dict(position_tint=100, min_size=28, max_size=48)),
    text=TEXT_4x16, vision=VISION_SMALL, steps=3000, warmup=200, eval_every=250,
)

PALETTE5 = ("red", "green", "blue", "yellow", "white")
SHAPES4 = ("circle", "square", "triangle", "cross")
CURRICULUM = ((300, dict(min_objects=1, max_objects=1)), (900, dict(min_objects=2, max_objects=3)))

_A1 = replace(
    _A0, name="a1", lr=2e-3, curriculum=CURRICULUM,
    spec=DemoSpec(image_size=168, coord_bin=4, scene=dict(
        position_tint=64, tint_headroom=True, min_size=28, max_size=48, colours=PALETTE5, shapes=SHAPES4)),
)

CURRICULUM_EASY = ((300, dict(min_objects=1, max_objects=1)),
                   (900, dict(min_objects=2, max_objects=3, conjunctive_share=0.0)))
_A2 = replace(_A1, name="a2", refs_per_image=4, curriculum=CURRICULUM_EASY)

TEXT_4x8 = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=8,
                num_key_value_heads=8)
_A3 = replace(_A2, name="a3", text=TEXT_4x8, rope_theta=1e6)

CURRICULUM_LONG = ((300, dict(min_objects=1, max_objects=1)),
                   (3000, dict(min_objects=2, max_objects=3, conjunctive_share=0.0)))
_A4 = replace(_A3, name="a4", steps=12000, curriculum=CURRICULUM_LONG, eval_every=500)

CURRICULUM_CONJ = ((300, dict(min_objects=1, max_objects=1)),
                   (3000, dict(min_objects=2, max_objects=3, conjunctive_share=1.0)))
_A5 = replace(_A4, name="a5", curriculum=CURRICULUM_CONJ)

# All 8 colours x 6 shapes (48 descriptions): too many for the image tokens to tabulate "where is each
# description", so the answer has to be looked up. Tint 48 keeps every colour pair apart by more than the ramp.
SCENE_48 = dict(position_tint=48, tint_headroom=True, min_size=28, max_size=48)
_A6 = replace(_A5, name="a6", spec=DemoSpec(image_size=168, coord_bin=4, scene=SCENE_48))

# Prompt before the image (backend `image_position=after_prompt`): image tokens read the expression, so the
# answer only has to fetch the position of the matching cell. 112 px, objects fill whole 28 px token cells (4x4
# grid, 3-5 objects, every distractor shares the referent's colour or shape). What each measured:
# docs/demo-model-experiments.md ("Prompt before the image").
GRID_SCENE = dict(position_tint=64, tint_headroom=True, min_objects=3, max_objects=5, grid_cell=28,
                  conjunctive_share=1.0, colours=PALETTE5, shapes=SHAPES4)
GRID_CURRICULUM = ((300, dict(min_objects=1, max_objects=1)),
                   (1500, dict(min_objects=2, max_objects=3, conjunctive_share=0.0)))
# t1: 8 heads x 16 dims, no dropout: solved by ~2,500 steps, fragile to random heads.
_T1 = replace(_A0, name="t1", steps=3000, lr=2e-3, warmup=100, eval_every=250, coord_sigma=0.0, text=TEXT_4x8,
              curriculum=GRID_CURRICULUM, rope_theta=1e6,
              spec=DemoSpec(image_size=112, coord_bin=4, scene=GRID_SCENE, prompt_first=True))
# t2: 16 heads x 8 dims, head dropout 0.1 everywhere: robust to random heads, retrieval spread over ~10 heads.
_T2 = replace(_T1, name="t2", text=TEXT_4x16, head_drop=0.1, steps=5000)
# t3-t5: t2 + whole-head group lasso (prune heads): 1e-3 from step 0, 3e-4 and 1e-3 ramped in from step 1500.
_T3 = replace(_T2, name="t3", group_lasso=1e-3, steps=4000)
_T4 = replace(_T2, name="t4", group_lasso=3e-4, lasso_from=1500, lasso_ramp=500, steps=4000)
_T5 = replace(_T4, name="t5", group_lasso=1e-3)
# t6: head dropout only in text layers 0-1 (where image tokens match themselves against the expression), none in
# layers 2-3, so the answer's lookup need not be copied into many heads.
_T6 = replace(_T2, name="t6", head_drop_layers=(0, 1), steps=3500)
# t7: t1's 8 heads x 16 dims with head dropout 0.1 in layers 0-1 only: robust matching, undiluted lookup heads.
_T7 = replace(_T1, name="t7", head_drop=0.1, head_drop_layers=(0, 1))

DESIGNS: dict[str, Design] = {d.name: d for d in [
    _A0, _A1, _A2, _A3, _A4, _A5, _A6, _T1, _T2, _T3, _T4, _T5, _T6, _T7,
]}
# The shipped model's design (`vrh-lmms train-tiny` default): t1, the only design whose top heads are causal.
DESIGNS["demo"] = replace(_T1, name="demo")


def get_design(name: str, **overrides) -> Design:
    if name not in DESIGNS:
        raise KeyError(f"unknown design {name!r}; known: {', '.join(DESIGNS)}")
    return replace(DESIGNS[name], **{k: v for k, v in overrides.items() if v is not None})
