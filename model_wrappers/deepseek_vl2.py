"""`vrh_deepseek_vl2`: our backend for DeepSeek-VL2 (lmms-eval has none), with head ablation.

It uses DeepSeek's own `deepseek_vl2` package (DeepseekVLV2Processor, DeepseekVLV2ForCausalLM), which is not on
PyPI. Conversations follow DeepSeek's inference script: `<|User|>` with one `<image>` line per image before the
task text, an empty `<|Assistant|>` turn, empty system prompt; batches are left padded by the processor's
`batchify`. Answers keep special tokens (`<|ref|>`, `<|det|>` carry the boxes); end-of-sentence and padding
tokens are stripped. The decoder is DeepSeek-MoE under `language.model.layers`; with MLA its o_proj input is
num_heads * v_head_dim, which the geometry takes from the attention module.
"""

from __future__ import annotations

from typing import Any

import torch
from PIL import Image

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model_wrappers.base import VRHMixin
from vrh_lmms.model_wrappers.own_backend import VRHOwnBackend

INSTALL_HINT = ("install DeepSeek's code with: pip install git+https://github.com/deepseek-ai/DeepSeek-VL2 "
                "(it was written for transformers 4.38; it may not import beside this project's transformers 5, "
                "in which case run it in its own environment)")


def import_deepseek_vl2() -> tuple[type, type]:
    """(DeepseekVLV2Processor, DeepseekVLV2ForCausalLM), or one clear error saying how to get them."""
    try:
        # deferred: optional dependency (deepseek_vl2) may be absent
        from deepseek_vl2.models import DeepseekVLV2ForCausalLM, DeepseekVLV2Processor
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] == "deepseek_vl2":
            raise VRHError(f"vrh_deepseek_vl2 needs the 'deepseek_vl2' package, which is not installed; "
                           f"{INSTALL_HINT}") from None
        raise VRHError(f"vrh_deepseek_vl2: the deepseek_vl2 package needs {exc.name!r}, which is not installed") \
            from None
    except ImportError as exc:
        raise VRHError(f"vrh_deepseek_vl2: the deepseek_vl2 package failed to import ({exc}); {INSTALL_HINT}") \
            from None
    return DeepseekVLV2Processor, DeepseekVLV2ForCausalLM


def conversation(context: str, images: list[Image.Image]) -> list[dict[str, Any]]:
    text = "<image>\n" * len(images) + context.replace("<image>", "").strip()
    return [{"role": "<|User|>", "content": text, "images": images}, {"role": "<|Assistant|>", "content": ""}]


class DeepseekVL2Backend(VRHOwnBackend):
    backend_name = "vrh_deepseek_vl2"
    skip_special_tokens = False
    # what `generate` takes from the processor's batch (it also holds sft_format, labels, seq_lens)
    model_keys = ("input_ids", "attention_mask", "images", "images_seq_mask", "images_spatial_crop")

    def load_model(self, pretrained: str, **kwargs: Any) -> torch.nn.Module:
        _, model_cls = import_deepseek_vl2()
        return model_cls.from_pretrained(pretrained, **kwargs)

    def load_processor(self, pretrained: str) -> Any:
        processor_cls, _ = import_deepseek_vl2()
        return processor_cls.from_pretrained(pretrained)

    def build_inputs(self, contexts: list[str], images: list[list[Image.Image]]) -> dict[str, Any]:
        samples = [self.processor.process_one(conversations=conversation(c, imgs), images=imgs,
                                              inference_mode=True, system_prompt="")
                   for c, imgs in zip(contexts, images)]
        batch = self.processor.batchify(samples, padding="left")
        return {k: batch[k] for k in self.model_keys}

    def decode(self, new_tokens: torch.Tensor) -> list[str]:
        tok = self.tokenizer
        drop = {t for t in (tok.eos_token_id, tok.pad_token_id) if t is not None}
        rows = [[int(t) for t in row if int(t) not in drop] for row in new_tokens]
        return [tok.decode(row, skip_special_tokens=False) for row in rows]


class VRHDeepseekVL2(VRHMixin, DeepseekVL2Backend):
    vrh_family = "deepseek_vl2"
