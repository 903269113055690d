"""Molmo 2: `vrh_molmo2` (our backend: lmms-eval has none), a tiny Molmo2ForConditionalGeneration that answers per
image and per head set, its image-token layout against Molmo2Processor at Molmo2-8B's settings, its pointing
format read in its convention, and discovery end to end.

- heads=none answers equal plain transformers greedy generation on the backend's prompt (no lmms-eval backend to
  compare with);
- ablated logits (on the exact inputs the backend passed to generate) equal the independent reference: eager
  attention with the heads' outputs zeroed, under the model's own masks (bidirectional among image tokens);
- the layout accounts for exactly the `<im_patch>` tokens the real processor writes at the published settings on 12
  sizes (global view and 1 to 8 overlapping crops), agrees with its `image_grids`, and the token -> cell mapping is
  checked by experiment on the tiny model.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from support import family_checks as checks

from vrh_lmms.base.boxes.known import CONVENTIONS
from vrh_lmms.base.families import get_family
from vrh_lmms.model.capture.extras import layout_extras
from vrh_lmms.model.capture.layouts import image_token_map
from vrh_lmms.model.tiny.inputs import render_prompt, scene_messages

torch.set_num_threads(1)

FAMILY = "molmo2"


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoints):
    return str(tiny_checkpoints(FAMILY))


def test_wrapper_registered_with_its_family():
    from vrh_lmms.model_wrappers.manifests import WRAPPERS
    from vrh_lmms.model_wrappers.molmo2 import VRHMolmo2

    assert VRHMolmo2.vrh_model_id() == "vrh_molmo2" and "VRHMolmo2" in WRAPPERS["vrh_molmo2"][1:]
    fam = get_family(FAMILY)
    assert fam.box_convention == "molmo2" and "molmo2" in CONVENTIONS and fam.layout == "molmo2"


def test_heads_none_answers_like_plain_transformers(ckpt):
    """The backend's prompt (chat template: the image, then the task text), greedy generate, special tokens
    skipped; a left-padded batch answers as one prompt at a time."""
    from vrh_lmms.model_wrappers.molmo2 import VRHMolmo2

    checks.check_heads_none_answers_like_plain_transformers(VRHMolmo2, ckpt)


@pytest.mark.exact
def test_ablated_logits_equal_eager_reference(ckpt):
    from vrh_lmms.model_wrappers.molmo2 import VRHMolmo2

    inputs = checks.check_ablated_logits_equal_eager_reference(VRHMolmo2, ckpt)
    assert inputs["mm_token_type_ids"].sum() > 0  # the bidirectional image block was in play


def test_tiny_answers_depend_on_image_and_heads(ckpt):
    """Six scenes, one prompt: at least four different answers; ablating two heads changes some answer."""
    checks.check_answers_depend_on_image_and_heads(ckpt)


# ------------------------------------------------------------------------------------- layout vs processor
SIZES = [(640, 480), (480, 640), (97, 131), (1000, 250), (250, 1000), (30, 30), (333, 334), (1200, 90),
         (90, 700), (2000, 1500), (2400, 1200), (4000, 500)]


@pytest.mark.exact
def test_layout_counts_equal_real_processor(ckpt):
    """Molmo2-8B's processor (378 px crops, patch 14, 8 crops, margins 4 / 4, 2 x 2 pooling) around the tiny
    tokenizer: every size's `<im_patch>` tokens are covered, the global view is 14 x 14, the crop view's grid is
    the processor's `image_grids`, and the sizes reach 1 to 8 crops."""
    from transformers import AutoTokenizer

    from vrh_lmms.model.tiny.molmo2 import molmo2_processor

    processor = molmo2_processor(AutoTokenizer.from_pretrained(ckpt), crop=378, patch=14)
    crops_seen = set()
    for w, h in SIZES:
        image = Image.new("RGB", (w, h), (90, 90, 90))
        batch = processor(text=[render_prompt(processor, scene_messages("it", image))], images=[image],
                          return_tensors="pt")
        tmap = image_token_map(FAMILY, batch["input_ids"][0], (w, h), layout_extras(FAMILY, processor, batch, 0))
        low_h, low_w, high_h, high_w = batch["image_grids"][0].tolist()
        views = np.array(tmap.view)
        assert (low_h, low_w) == (14, 14) and (views == "global").sum() == 14 * 14
        assert (views == "crops").sum() == high_h * high_w and len(tmap.no_cell) == 0
        cells = tmap.cells
        assert (cells[:, 0] >= 0).all() and (cells[:, 2] <= w + 1e-3).all()
        assert (cells[:, 1] >= 0).all() and (cells[:, 3] <= h + 1e-3).all()
        # each view tiles the whole image: the cell areas add up to it
        for view in ("global", "crops"):
            c = cells[torch.as_tensor(views == view)]
            assert float(((c[:, 2] - c[:, 0]) * (c[:, 3] - c[:, 1])).sum()) == pytest.approx(w * h, rel=1e-4)
        crops_seen.add(int(batch["image_num_crops"][0]) - 1)
    assert min(crops_seen) == 1 and max(crops_seen) == 8 and len(crops_seen) >= 3, crops_seen


def test_pooled_spans_follow_the_processor_padding():
    """27 patches pooled by 2 (the published global view): 13 full windows, then a last one of one patch (the pad
    goes after); 9 patches pooled by 3 pad nothing; 10 by 4: one pad before, one after."""
    from vrh_lmms.model.capture.tilings_molmo2 import pooled_spans

    s = pooled_spans(27, 2, 14.0)
    assert len(s) == 14 and s[0] == (0.0, 28.0) and s[-1] == (364.0, 378.0)
    assert pooled_spans(9, 3, 1.0) == ((0, 3), (3, 6), (6, 9))
    assert pooled_spans(10, 4, 1.0) == ((0, 3), (3, 7), (7, 10))


@pytest.mark.exact
@pytest.mark.parametrize("size", [(150, 90), (90, 200), (300, 60), (97, 131)])
def test_layout_by_perturbation(size, ckpt):
    """A rectangle drawn on a flat image changes exactly the predicted tokens' inputs to text layer 0 (vision
    attention zeroed, the adapter's window pooling kept); (300, 60) and (90, 200) tile into several crops."""
    checks.check_layout_by_perturbation(ckpt, FAMILY, size)


# ------------------------------------------------------------------------------------------- points, discovery
def test_points_read_in_molmo2_convention():
    """Molmo 2 points per mille of the image (`<points coords="image id x y ...">`); a box is asked as its two
    corners and read from the first two points; a point task reads every point."""
    conv = CONVENTIONS["molmo2"]
    assert conv.pointing_prompt("the cat") == "Point to the cat."
    assert "corner" in conv.prompt("the cat")
    reply = 'Counting the <points coords="1 1 073 160 2 173 600" alt="boats">the boats</points> shows 2.'
    pts = conv.read_points(reply, (1000, 500))
    assert not pts.from_boxes and pts.points == [[73.0, 80.0], [173.0, 300.0]]
    box = conv.read_box('<points coords="1 1 250 250 2 750 750" alt="cat">cat</points>', (200, 100))
    assert box.box == [50.0, 25.0, 150.0, 75.0]
    two_frames = '<points coords="1 1 100 200;2 1 300 400">x</points>'
    assert conv.read_points(two_frames, (1000, 1000)).points == [[100.0, 200.0], [300.0, 400.0]]
    assert conv.read_box("no points here", (10, 10)).box is None


@pytest.mark.slow
def test_discovery_end_to_end(ckpt, tmp_path, monkeypatch):
    """vrh_synth_grounding through lmms-eval's evaluator and vrh_molmo2: a complete heads file, box tokens found
    among the image tokens, mass on the box never above the mass on the image."""
    checks.check_discovery_end_to_end("vrh_molmo2", FAMILY, ckpt, tmp_path, monkeypatch)
