"""Capture on Phi-4 multimodal, whose text model is the top-level config (switched with the "" sub-config key).

Reference: the model's own eager attention with full weights, recorded through a registered attention function
(`output_attentions=True` breaks Phi-4's vision feature extraction in transformers 5.24: the vision model's
`hidden_states` come back None).
"""

from __future__ import annotations

import importlib

import pytest
import torch
from PIL import Image
from test_capture import assert_matches_eager, random_plan
from test_layouts_phi4 import IMAGE_TOKEN, Phi4Processor, build_phi4, phi4_batch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from vrh_lmms.model.capture import capture_attention
from vrh_lmms.model.capture.attention import text_config_key

# float-exact outcomes: CI runs these once more under ATEN_CPU_CAPABILITY=default (docs/contracts.md)
pytestmark = pytest.mark.exact

torch.set_num_threads(1)

RECORDED: list[torch.Tensor] = []


def _eager_recording(module, query, key, value, attention_mask, **kwargs):
    eager = importlib.import_module(type(module).__module__).eager_attention_forward
    out, weights = eager(module, query, key, value, attention_mask, **kwargs)
    RECORDED.append(weights.detach())
    return out, weights


AttentionInterface.register("vrh_test_eager_record", _eager_recording)
AttentionMaskInterface.register("vrh_test_eager_record", eager_mask)


def test_phi4_capture_matches_eager_on_padded_batch():
    model, processor = build_phi4(), Phi4Processor()
    images = [Image.new("RGB", (500, 300), (90, 120, 150)), Image.new("RGB", (200, 210), (10, 200, 30))]
    batch = phi4_batch(processor, images)
    assert (batch["attention_mask"] == 0).any()
    assert text_config_key(model.config, model.config) == ""
    plan = random_plan(batch, image_token_id=IMAGE_TOKEN)
    vision_before = model.config.vision_config._attn_implementation
    with torch.no_grad():
        plain = model(**batch).logits
        with capture_attention(model, plan) as handle:
            assert model.config.vision_config._attn_implementation == vision_before  # text stack only
            captured = model(**batch).logits
        RECORDED.clear()
        model.set_attn_implementation({"": "vrh_test_eager_record"})
        model(**batch)
        model.set_attn_implementation({"": "sdpa"})
        eager = torch.stack(RECORDED, dim=1)
    torch.testing.assert_close(captured, plain, rtol=0, atol=0)
    assert model.config._attn_implementation == "sdpa"
    assert_matches_eager(handle.result(), plan, eager)
