"""Model inputs for tiny checkpoints: a few synthetic scenes through the checkpoint's own processor.

Used by tests and benchmarks of every family: the processor's chat template decides the prompt layout, so the
same helper serves all families whose processors support image content in messages. Families that ship no chat
template (PaliGemma2 "pt") get their raw prompt format instead: the image placeholder, then the text.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import AutoModelForImageTextToText, AutoProcessor, Qwen2_5OmniForConditionalGeneration

from vrh_lmms.base.synth.scenes import SceneConfig, generate_scene

# processors that read a flat image list as the images of one sample: they get one list per sample
NESTED_IMAGES = frozenset({"Gemma3Processor", "Gemma4Processor"})


def per_sample_images(processor, images: list) -> list:
    """One image per prompt, in the form the processor reads that way."""
    return [[image] for image in images] if type(processor).__name__ in NESTED_IMAGES else images


def scene_messages(expression: str, image) -> list[dict]:
    return [{"role": "user", "content": [{"type": "image", "image": image},
                                          {"type": "text", "text": f"Locate {expression} in the image."}]}]


def render_prompt(processor, conversation: list[dict]) -> str:
    """Prompt text of one conversation: the checkpoint's chat template, else image placeholders + text."""
    if getattr(processor, "chat_template", None):
        return processor.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    parts = []
    for message in conversation:
        for item in message["content"]:
            parts.append(processor.image_token if item["type"] == "image" else item.get("text", ""))
    return "".join(parts)


def processor_inputs(processor, n: int = 2, seed: int = 0, image_sizes: list[int] | None = None,
                     padding_side: str = "left", texts: list[str] | None = None):
    """A padded batch of `n` scenes; different prompt lengths so left padding really occurs."""
    image_sizes = image_sizes or [112] * n
    convs, images = [], []
    for i in range(n):
        scene = generate_scene(i, seed, SceneConfig(image_size=image_sizes[i], min_size=16, max_size=40))
        expr = texts[i] if texts else scene.expression + " on the left" * i
        convs.append(scene_messages(expr, scene.image))
        images.append(scene.image)
    prompts = [render_prompt(processor, c) for c in convs]
    batch = processor(text=prompts, images=per_sample_images(processor, images), return_tensors="pt", padding=True, padding_side=padding_side)
    batch.pop("labels", None)  # PaliGemma's processor derives training labels; inference inputs never want them
    return as_float32(batch)


def as_float32(batch):
    """Floating inputs in float32, the tiny checkpoints' dtype (Llama 4's processor normalises in bfloat16)."""
    for key, value in batch.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float32:
            batch[key] = value.float()
    return batch


def load_tiny(path: str | Path, model_cls=None, **kwargs):
    """Load a tiny checkpoint in float32 with its processor."""
    if model_cls is None and _model_type(path) == "qwen2_5_omni":
        # no Auto class maps Qwen2.5-Omni, and only its thinker has a forward and a text generate
        model = Qwen2_5OmniForConditionalGeneration.from_pretrained(path, dtype=torch.float32, **kwargs).thinker
        return model.eval(), AutoProcessor.from_pretrained(path)
    cls = model_cls or AutoModelForImageTextToText
    model = cls.from_pretrained(path, dtype=torch.float32, **kwargs).eval()
    return model, AutoProcessor.from_pretrained(path)


def _model_type(path: str | Path) -> str | None:
    config = Path(path) / "config.json"
    return json.loads(config.read_text()).get("model_type") if config.is_file() else None
