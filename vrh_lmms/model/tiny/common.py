"""Shared helpers for the tiny checkpoint factories."""

from __future__ import annotations

import contextlib
import importlib.resources
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch


def chat_template(family: str) -> str:
    """A family's official chat template, kept verbatim as data (vrh_lmms/assets/chat_templates/<family>.jinja) so
    prompts render exactly as with the real checkpoints."""
    return (importlib.resources.files("vrh_lmms") / "assets" / "chat_templates" / f"{family}.jinja").read_text()


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed every RNG that weight init touches, and restore the global torch RNG afterwards."""
    state = torch.random.get_rng_state()
    py_state = random.getstate()
    np_state = np.random.get_state()
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    try:
        yield
    finally:
        torch.random.set_rng_state(state)
        random.setstate(py_state)
        np.random.set_state(np_state)


def save_checkpoint(out_dir: str | Path, model, processor, tokenizer) -> Path:
    """Save model (safetensors), processor, tokenizer and chat template side by side, as hub checkpoints are."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    if processor is not None:
        processor.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


# Text backbone geometry shared by the tiny families: 2 layers, 4 query heads sharing 2 kv heads (GQA), head_dim 16.
# GLM-4V, whose attention derives head_dim from hidden_size / heads, gets 64 / 4 = 16 as well.
DEFAULT_TEXT: dict = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                      "num_key_value_heads": 2, "head_dim": 16}


def set_generation_eos(model, eos_ids: list[int], pad_id: int | None = None) -> None:
    """Stop ids as the real checkpoints' generation_config.json lists them (often more than the tokenizer's eos)."""
    model.generation_config.eos_token_id = eos_ids if len(eos_ids) > 1 else eos_ids[0]
    if pad_id is not None:
        model.generation_config.pad_token_id = pad_id


def init_and_save(out_dir: str | Path, seed: int, model_cls, config, processor, tokenizer,
                  stop_tokens: tuple[str, ...] = (), pad_token: str | None = None) -> Path:
    """Random-init `model_cls(config)` under `seed` in float32 and save it beside its processor and tokenizer.

    `stop_tokens` become the generation config's eos ids (families whose chat turns end on several tokens).
    """
    with seeded(seed):
        model = model_cls(config).to(torch.float32).eval()
    if stop_tokens:
        ids = tokenizer.convert_tokens_to_ids
        set_generation_eos(model, [ids(t) for t in stop_tokens], pad_id=ids(pad_token) if pad_token else None)
    return save_checkpoint(out_dir, model, processor, tokenizer)


@dataclass(frozen=True)
class TinyFamily:
    """How one family's tiny checkpoint is made, in the order every factory follows: the tokenizer (with
    `extra_words`), the config (`text` / `vision` overrides of the family's defaults), the processor, then the seeded
    random init saved beside them. `build` is the family's factory (vrh_lmms.model.tiny.registry)."""

    name: str  # as the docstring of `build` says it: "a complete tiny <name> checkpoint"
    model_cls: Any
    make_tokenizer: Callable[[tuple[str, ...]], Any]
    make_config: Callable[..., Any]  # (tokenizer, text, vision, initializer_range)
    make_processor: Callable[..., Any]  # (tokenizer, vision, **processor_kwargs)
    stop_tokens: tuple[str, ...] = ()  # the generation config's eos ids (init_and_save)
    pad_token: str | None = None
    sensitive: bool = False  # weights whose answers depend on the image and the heads (tiny/sensitive.py)
    never_generate: tuple[str, ...] = ()  # with `sensitive`: tokens generation suppresses

    def build(self, out_dir: str | Path, seed: int = 0, *, text: dict[str, Any] | None = None,
              vision: dict[str, Any] | None = None, initializer_range: float = 0.02,
              extra_words: tuple[str, ...] = (), processor_kwargs: dict[str, Any] | None = None) -> Path:
        """Write a complete tiny checkpoint of this family (config, weights, tokenizer, processor, template)."""
        tokenizer = self.make_tokenizer(extra_words)
        config = self.make_config(tokenizer, text, vision, initializer_range)
        processor = self.make_processor(tokenizer, vision, **(processor_kwargs or {}))
        if self.sensitive:
            # deferred: import cycle (tiny/sensitive.py saves through this module's helpers)
            from vrh_lmms.model.tiny.sensitive import save_sensitive

            return save_sensitive(out_dir, seed, self.model_cls, config, processor, tokenizer,
                                  stop_tokens=self.stop_tokens, pad_token=self.pad_token,
                                  never_generate=self.never_generate)
        return init_and_save(out_dir, seed, self.model_cls, config, processor, tokenizer,
                             stop_tokens=self.stop_tokens, pad_token=self.pad_token)
