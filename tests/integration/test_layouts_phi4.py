"""Phi-4 multimodal layout by experiment, on a tiny `Phi4MultimodalForCausalLM` built here from a config.

No tiny checkpoint family exists for Phi-4 (its processor needs an audio feature extractor and a tokenizer with
image/audio tokens); the image processor is the real one and input ids are built as the processor would write them
(`num_img_tokens` image placeholders). The real 448 px crops are kept, since the processor's token formula assumes
them; the vision tower is tiny (2 layers, width 32), so a forward takes well under a second.
"""

from __future__ import annotations

import pytest
import torch

from vrh_lmms.model.capture.verify import check_layout

# float-exact outcomes: CI runs these once more under ATEN_CPU_CAPABILITY=default (docs/contracts.md)
pytestmark = pytest.mark.exact

torch.set_num_threads(1)

IMAGE_TOKEN = 50
PAD = 0


class Phi4Processor:
    """The two attributes layouts read: the real image processor and the image placeholder id."""

    image_token_id = IMAGE_TOKEN

    def __init__(self) -> None:
        from transformers import Phi4MultimodalImageProcessor

        self.image_processor = Phi4MultimodalImageProcessor()


def build_phi4():
    from transformers import Phi4MultimodalConfig, Phi4MultimodalForCausalLM

    torch.manual_seed(0)
    config = Phi4MultimodalConfig(
        vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=8192, original_max_position_embeddings=4096, bos_token_id=1,
        eos_token_id=2, pad_token_id=PAD,
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                       "image_token_id": IMAGE_TOKEN},
        audio_config={"hidden_size": 32, "intermediate_size": 64, "num_blocks": 1, "num_attention_heads": 2,
                      "ext_pw_out_channel": 32, "depthwise_separable_out_channel": 32, "nemo_conv_channels": 32,
                      "audio_token_id": 51},
    )
    return Phi4MultimodalForCausalLM(config).eval()


def phi4_batch(processor: Phi4Processor, images, prompts=((3, 4), (3, 4, 8, 9, 10))):
    """Left-padded batch: prompt ids, the image's placeholders, then a fixed suffix (as the processor lays them)."""
    images = images if isinstance(images, list) else [images]
    out = processor.image_processor(images, return_tensors="pt")
    rows = [list(prompts[i % len(prompts)]) + [IMAGE_TOKEN] * int(n) + [5, 6, 7]
            for i, n in enumerate(out["num_img_tokens"])]
    width = max(len(r) for r in rows)
    ids = torch.tensor([[PAD] * (width - len(r)) + r for r in rows])
    return {"input_ids": ids, "attention_mask": (torch.arange(width)[None] >= width - torch.tensor(
                [len(r) for r in rows])[:, None]).long(),
            "image_pixel_values": out["image_pixel_values"], "image_sizes": out["image_sizes"],
            "image_attention_mask": out["image_attention_mask"]}


@pytest.fixture(scope="module")
def phi4():
    return build_phi4(), Phi4Processor()


@pytest.mark.parametrize("size", [(500, 300), (300, 520)])
def test_phi4_layout_by_perturbation(phi4, size):
    """HD crops (newline column, right/bottom padding) + separator + global view of the padded canvas."""
    model, processor = phi4
    for frac in [(0.2, 0.3, 0.55, 0.7), (0.6, 0.05, 0.95, 0.4)]:
        check = check_layout(model, processor, "phi4_multimodal", size, phi4_batch, frac=frac)
        assert check.hooked > 0 and check.clearance >= 3.0
        assert 0 < len(check.changed) < check.image_tokens
        assert check.changed == check.predicted, (
            f"{size} rect {check.rect}: changed-only {sorted(check.changed - check.predicted)}, "
            f"predicted-only {sorted(check.predicted - check.changed)}")
