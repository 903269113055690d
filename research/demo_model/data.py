"""Model inputs exactly as `vrh_qwen25` (lmms-eval's chat `qwen2_5_vl` backend) builds them, plus a fast path for
training.

The chat backend (`lmms_eval/models/chat/qwen2_5_vl.py`, `generate_until`) turns the task's messages into HF messages
whose image part is the PIL image the task returned, unchanged (`ChatMessages.to_hf_messages`: no re-encoding, no
pixel limits of its own), renders them with the processor's chat template, loads the image with
`qwen_vl_utils.process_vision_info` (`fetch_image`: RGB, smart resize with factor 28 between qwen_vl_utils' default
pixel limits) and calls the processor. `backend_inputs` does literally that, so the trainer sees the pixels the
evaluation feeds (tests/acceptance/test_demo_input_path.py compares both, bit for bit, through the real backend).
`FastEncoder` produces the same tensors without the per-sample processor call: the prompt differs between scenes only
in the expression's words, and pixel values are the processor's affine rescale + normalise + patchify of the fetched
image (checked against the processor by `FastEncoder.check`).

Until 2026-12-03 the trainer followed the *simple* backend instead (a JPEG quality-85 data URL): the shipped demo model
was trained on those pixels; its model card states the difference and its measured effect.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image

from vrh_lmms.base.synth.demo_spec import SYSTEM_PROMPT, DemoSpec, prompt_for
from vrh_lmms.base.synth.scenes import Scene


def image_part(image: Image.Image) -> dict:
    """The chat backend's HF message part for an image: the task's PIL image itself."""
    return {"type": "image", "image": image}


def backend_messages(image: Image.Image, expression: str, spec: DemoSpec) -> list[dict]:
    """System + user messages; with `spec.prompt_first` the text part comes before the image, as `vrh_qwen25 ...
    image_position=after_prompt` sends it."""
    text = {"type": "text", "text": prompt_for(expression)}
    content = [text, image_part(image)] if spec.prompt_first else [image_part(image), text]
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": content}]


def backend_inputs(processor, scenes: Sequence[Scene], spec: DemoSpec):
    """Processor outputs for a batch of scenes, built the way the chat backend's `generate_until` builds them."""
    from qwen_vl_utils import process_vision_info

    batched = [backend_messages(s.image, s.expression, spec) for s in scenes]
    texts = processor.apply_chat_template(batched, tokenize=False, add_generation_prompt=True)
    images, videos = process_vision_info(batched)
    return processor(text=texts, images=images, videos=videos, padding=True,
                     padding_side="left" if len(scenes) > 1 else "right", return_tensors="pt")


def decoded_image(scene: Scene, spec: DemoSpec) -> np.ndarray:
    """The uint8 image the processor receives: qwen_vl_utils' fetch_image of the scene's own pixels."""
    from qwen_vl_utils.vision_process import fetch_image

    return np.asarray(fetch_image(image_part(scene.image)), dtype=np.uint8)


class FastEncoder:
    """Build backend-identical batches from scenes with one processor call at construction time."""

    def __init__(self, processor, spec: DemoSpec, probe_scene: Scene):
        self.spec = spec
        self.processor = processor
        self.tokenizer = processor.tokenizer
        ref = backend_inputs(processor, [probe_scene], spec)
        self.template = ref["input_ids"][0].clone()
        self.mm_token_type_ids = ref["mm_token_type_ids"][0].clone()
        self.grid_thw = ref["image_grid_thw"][0].clone()
        words = probe_scene.expression.split()
        ids = self.tokenizer.convert_tokens_to_ids(words)
        self.expr_pos = _find(self.template.tolist(), ids)
        ip = processor.image_processor
        self.mean = torch.tensor(ip.image_mean, dtype=torch.float32)[:, None, None]
        self.std = torch.tensor(ip.image_std, dtype=torch.float32)[:, None, None]
        self.rescale = float(ip.rescale_factor)
        self.patch, self.merge, self.tps = ip.patch_size, ip.merge_size, ip.temporal_patch_size
        self.seq_len = int(self.template.numel())

    def input_ids(self, expression: str) -> torch.Tensor:
        ids = self.template.clone()
        words = expression.split()
        if len(words) != len(self.expr_pos):
            raise ValueError(f"expression {expression!r} has {len(words)} words; "
                             f"the template holds {len(self.expr_pos)}")
        ids[self.expr_pos] = torch.tensor(self.tokenizer.convert_tokens_to_ids(words))
        return ids

    def pixel_values(self, images: np.ndarray) -> torch.Tensor:
        """(B, H, W, 3) uint8 -> (B * patches, 3 * tps * p * p) float32, as the image processor lays them out."""
        x = torch.from_numpy(images).permute(0, 3, 1, 2).to(torch.float32) * self.rescale
        x = (x - self.mean) / self.std
        b, c, h, w = x.shape
        p, m, t = self.patch, self.merge, self.tps
        gh, gw = h // p, w // p
        x = x.reshape(b, c, gh // m, m, p, gw // m, m, p).permute(0, 2, 5, 3, 6, 1, 4, 7)
        x = x.unsqueeze(6).expand(-1, -1, -1, -1, -1, -1, t, -1, -1)
        return x.reshape(b * gh * gw, c * t * p * p)

    def batch(self, scenes: Sequence[Scene], images: np.ndarray | None = None) -> dict[str, torch.Tensor]:
        if images is None:
            images = np.stack([decoded_image(s, self.spec) for s in scenes])
        b = len(scenes)
        input_ids = torch.stack([self.input_ids(s.expression) for s in scenes])
        return {
            "input_ids": input_ids,
            "attention_mask": torch.ones_like(input_ids),
            "mm_token_type_ids": self.mm_token_type_ids.expand(b, -1).clone(),
            "pixel_values": self.pixel_values(images),
            "image_grid_thw": self.grid_thw.expand(b, -1).clone(),
        }

    def check(self, scenes: Sequence[Scene], atol: float = 1e-5) -> float:
        """Largest deviation from the backend path over these scenes; raises if any tensor differs."""
        worst = 0.0
        for s in scenes:
            ref = backend_inputs(self.processor, [s], self.spec)
            fast = self.batch([s])
            for key in ("input_ids", "attention_mask", "mm_token_type_ids", "image_grid_thw"):
                if not torch.equal(ref[key], fast[key]):
                    raise AssertionError(f"fast path differs from the backend in {key} for scene {s.scene_id}")
            dev = float((ref["pixel_values"] - fast["pixel_values"]).abs().max())
            if dev > atol:
                raise AssertionError(f"pixel_values differ by {dev} for scene {s.scene_id}")
            worst = max(worst, dev)
        return worst


def answer_token_ids(tokenizer, box: Sequence[int]) -> list[int]:
    """`[ x1 , y1 , x2 , y2 ]` then `<|im_end|>`, as the word-level tokenizer splits a JSON list."""
    x1, y1, x2, y2 = box
    toks = ["[", str(x1), ",", str(y1), ",", str(x2), ",", str(y2), "]"]
    return tokenizer.convert_tokens_to_ids(toks) + [tokenizer.eos_token_id]


def _find(seq: list[int], sub: list[int]) -> torch.Tensor:
    for i in range(len(seq) - len(sub) + 1):
        if seq[i:i + len(sub)] == sub:
            return torch.arange(i, i + len(sub))
    raise ValueError("expression tokens not found in the rendered prompt")
