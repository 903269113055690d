"""Activation patching of head outputs: exact identities (a run patched with itself, all heads, no heads) and one
head's patch equal to an independent computation (the o_proj output shifted by W_o[:, head] @ (clean - corrupt))."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import HeadRef
from vrh_lmms.base.synth.scenes import SceneConfig, generate_scene
from vrh_lmms.model.backbone import locate_decoder
from vrh_lmms.model.interventions.patching import patch_pair, patched_logits, record, teacher_forced
from vrh_lmms.model.tiny.inputs import load_tiny, render_prompt, scene_messages

torch.set_num_threads(1)


def prompt_inputs(processor, expression: str, image) -> dict[str, torch.Tensor]:
    batch = processor(text=[render_prompt(processor, scene_messages(expression, image))], images=[image],
                      return_tensors="pt")
    batch.pop("labels", None)
    return dict(batch)


@pytest.fixture(scope="module", params=["qwen2_5_vl", "internvl", "paligemma"])
def setup(request, tiny_checkpoints):
    model, processor = load_tiny(tiny_checkpoints(request.param))
    image = generate_scene(0, 3, SceneConfig(image_size=112, min_size=16, max_size=40)).image
    clean = prompt_inputs(processor, "the red circle", image)
    corrupt = prompt_inputs(processor, "the small blue square on the left", image)  # another length on purpose
    tok = processor.tokenizer
    vocab = [i for i in range(10, 60) if i not in tok.all_special_ids]
    answer_a, answer_b = torch.tensor(vocab[:4]), torch.tensor(vocab[4:7] + vocab[10:12])
    return model, locate_decoder(model), clean, corrupt, answer_a, answer_b


def test_patching_a_run_with_itself_is_bit_identical(setup):
    model, dec, clean, _, answer_a, _ = setup
    tf = teacher_forced(clean, answer_a)
    with torch.no_grad():
        plain = model(**tf.inputs, use_cache=False).logits
    own = record(model, dec, tf)
    for heads in ([HeadRef(0, 1)], dec.geometry.all_heads()):
        assert torch.equal(patched_logits(model, dec, tf, heads, own.values), plain)


def test_all_heads_recover_everything_and_no_heads_nothing(setup):
    """Every head of every layer on the answer rows carries all the prompt reaches them with: recovery 1."""
    model, dec, clean, corrupt, answer_a, answer_b = setup
    every = dec.geometry.all_heads()
    res = patch_pair(model, dec, clean, corrupt, answer_a, answer_b, head_sets={"all": every, "none": []},
                     per_head=False)
    assert abs(res.gap) > 1e-3, "clean and corrupted runs must differ for this test to mean something"
    assert res.recovery(res.sets["all"]) == pytest.approx(1.0, abs=1e-4)
    assert res.recovery(res.sets["none"]) == 0.0
    noised = patch_pair(model, dec, clean, corrupt, answer_a, answer_b, head_sets={"all": every}, per_head=False,
                        direction="noise")
    assert noised.recovery(noised.sets["all"]) == pytest.approx(0.0, abs=1e-4)


def test_one_head_patch_equals_output_shift(setup):
    """Reference: leave the o_proj input alone and add W_o[:, slice] @ (clean - corrupt) to its output on the
    answer rows; that is the same intervention computed another way (linearity of o_proj)."""
    model, dec, clean, corrupt, answer_a, _ = setup
    layer, head, d = dec.geometry.layers - 1, 2, dec.geometry.head_dim
    src, dst = teacher_forced(clean, answer_a), teacher_forced(corrupt, answer_a)
    rec_src, rec_dst = record(model, dec, src), record(model, dec, dst)
    got = patched_logits(model, dec, dst, [HeadRef(layer, head)], rec_src.values)
    sl = slice(head * d, (head + 1) * d)
    delta = (rec_src.values[layer][:, sl] - rec_dst.values[layer][:, sl]) @ dec.out_projs[layer].weight[:, sl].T

    def shift(module, args, out):
        out = out.clone()
        out[0, dst.rows] += delta.to(out.dtype)
        return out

    handle = dec.out_projs[layer].register_forward_hook(shift)
    try:
        with torch.no_grad():
            ref = model(**dst.inputs, use_cache=False).logits
    finally:
        handle.remove()
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-5)
    assert (got - patched_logits(model, dec, dst, [], rec_src.values)).abs().max() > 1e-6


def test_per_head_grid_and_checks(setup):
    model, dec, clean, corrupt, answer_a, answer_b = setup
    res = patch_pair(model, dec, clean, corrupt, answer_a, answer_b, head_sets={"top": [HeadRef(0, 0)]})
    g = dec.geometry
    assert res.heads.shape == (g.layers, g.heads) and np.isfinite(res.heads).all()
    assert res.sets["top"] == pytest.approx(res.heads[0, 0], abs=1e-9)
    with pytest.raises(VRHError, match="direction"):
        patch_pair(model, dec, clean, corrupt, answer_a, answer_b, direction="sideways")
    with pytest.raises(VRHError, match="answer rows"):
        patched_logits(model, dec, teacher_forced(clean, answer_b), [HeadRef(0, 0)],
                       record(model, dec, teacher_forced(clean, answer_a)).values)


def test_encoded_images_and_batches_keep_the_forward_exact(setup):
    """The vision tower runs once per sample (pre-encoded images) and a batch of copies gives the same rows."""
    model, _, clean, _, answer_a, _ = setup
    tf = teacher_forced(clean, answer_a)
    with torch.no_grad():
        plain = model(**tf.inputs, use_cache=False).logits
        once = model(**tf.batch(model, 1), use_cache=False).logits
        three = model(**tf.batch(model, 3), use_cache=False).logits
    assert "mm_encoder_outputs" in tf.batch(model, 1)
    assert torch.equal(once, plain)
    torch.testing.assert_close(three, plain.expand(3, -1, -1), rtol=0, atol=1e-5)


def test_batched_patching_equals_one_head_at_a_time(setup):
    model, dec, clean, corrupt, answer_a, answer_b = setup
    sets = {"pair": [HeadRef(0, 0), HeadRef(1, 3)]}
    one = patch_pair(model, dec, clean, corrupt, answer_a, answer_b, head_sets=sets, batch_size=1)
    many = patch_pair(model, dec, clean, corrupt, answer_a, answer_b, head_sets=sets, batch_size=5)
    np.testing.assert_allclose(many.heads, one.heads, rtol=0, atol=1e-5)
    assert many.sets["pair"] == pytest.approx(one.sets["pair"], abs=1e-5)


def test_answer_logprob_is_the_causal_lm_log_likelihood(setup):
    """The standard shift (logits at t predict token t + 1) over the answer part of input_ids, independently of
    the answer rows the patching code uses."""
    import torch.nn.functional as F

    from vrh_lmms.model.interventions.patching import answer_logprob

    model, _, clean, _, answer_a, _ = setup
    tf = teacher_forced(clean, answer_a)
    with torch.no_grad():
        logits = model(**tf.inputs, use_cache=False).logits
    ids = tf.inputs["input_ids"][0]
    p = clean["input_ids"].shape[1]
    ref = -F.cross_entropy(logits[0, :-1].double()[p - 1:], ids[1:][p - 1:], reduction="sum")
    assert answer_logprob(logits, tf) == pytest.approx(float(ref), abs=1e-9)


def test_noising_measures_the_share_destroyed(setup):
    """Noising every head wipes out the clean behaviour (destroyed 1), noising none keeps it (0): the noising
    direction's effect reads the same way round as the denoising recovery."""
    model, dec, clean, corrupt, answer_a, answer_b = setup
    every = dec.geometry.all_heads()
    noised = patch_pair(model, dec, clean, corrupt, answer_a, answer_b, head_sets={"all": every, "none": []},
                        per_head=False, direction="noise")
    assert noised.effect(noised.sets["all"], "noise") == pytest.approx(1.0, abs=1e-4)
    assert noised.effect(noised.sets["none"], "noise") == 0.0
    assert noised.recovery(noised.sets["none"]) == 1.0  # the old reading: a head that does nothing scored 100%
