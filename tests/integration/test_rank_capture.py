"""The ranker's capture on a tiny real-class Qwen2.5-VL: candidate spans of a 3-image prompt against the
processor's image_grid_thw, and the captured per-candidate mass against eager attention summed by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from oracles.intervention_refs import eager_attentions

from vrh_lmms.base.synth.scenes import SceneConfig, generate_scene
from vrh_lmms.model.tiny.inputs import load_tiny
from vrh_lmms.runs.rank.capture import candidate_mass, checked_spans, multi_image_inputs

torch.set_num_threads(1)
SIZES = [56, 112, 84]  # different sizes: different token counts per candidate


@pytest.fixture(scope="module")
def three_images(tiny_qwen25):
    model, processor = load_tiny(tiny_qwen25)
    images = [generate_scene(i, 0, SceneConfig(image_size=s, min_size=12, max_size=24)).image
              for i, s in enumerate(SIZES)]
    inputs = multi_image_inputs(processor, "the red circle", images, text_first=True)
    return model, processor, inputs


def test_spans_match_the_processors_token_counts(three_images):
    _, processor, inputs = three_images
    ids = inputs["input_ids"][0].tolist()
    spans = checked_spans(processor, inputs)
    merge = processor.image_processor.merge_size
    counts = [int(np.prod(g.tolist())) // merge**2 for g in inputs["image_grid_thw"]]
    assert [s.size for s in spans] == counts and len(set(counts)) == 3
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert all(ids[p] == pad for s in spans for p in s)
    assert all(spans[i].max() < spans[i + 1].min() for i in range(2)), "spans come in prompt order"


def test_candidate_mass_equals_eager_attention(three_images):
    model, processor, inputs = three_images
    spans = checked_spans(processor, inputs)
    got = candidate_mass(model, dict(inputs), spans)
    attn = eager_attentions(model, inputs).double()[0]  # (layers, heads, T, T)
    last = inputs["input_ids"].shape[1] - 1
    by_hand = np.stack([attn[:, :, last, torch.as_tensor(s)].sum(-1).numpy() for s in spans], axis=-1)
    np.testing.assert_allclose(got, by_hand, rtol=0, atol=2e-6)
    assert got.std() > 1e-4
