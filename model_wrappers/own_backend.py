"""A small lmms-eval simple backend for the families lmms-eval has none for (PaliGemma2, Magma, DeepSeek-VL2).

It holds everything those backends share, so each of them only says how to load its model and processor and how to
turn prompts and images into model inputs:
- batching with lmms-eval's Collator (grouped by generation kwargs, longest prompt first, results put back in
  request order), left padding when a batch holds more than one prompt;
- greedy decoding unless the task asks for a temperature > 0; `until` strings cut the answer;
- data-parallel runs under `accelerate launch` (one model copy per rank, `self.model` unwraps it);
- answers come from `self.model.generate(**inputs)` with the exact inputs built, so code that wraps `generate`
  (discovery) sees what the backend feeds the model.
Combine with `VRHMixin` (which pops the vrh model args and picks CPU device args when there is no CUDA).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from accelerate import Accelerator, DistributedType
from lmms_eval import utils
from lmms_eval.api.instance import Instance
from lmms_eval.api.model import lmms
from PIL import Image
from tqdm import tqdm

from vrh_lmms.base.errors import VRHError

# generation kwargs a task may set that we pass on to `generate`; others (e.g. `image_sizes`) are ignored
GEN_KEYS = ("max_new_tokens", "min_new_tokens", "num_beams", "temperature", "top_p", "top_k", "do_sample",
            "repetition_penalty", "length_penalty", "no_repeat_ngram_size")


def split_gen_kwargs(gen_kwargs: dict[str, Any], default_max_new_tokens: int) -> tuple[list[str], dict[str, Any]]:
    """Task generation kwargs -> (`until` strings, kwargs for `generate`); greedy unless temperature > 0."""
    until = gen_kwargs.get("until") or []
    if isinstance(until, str):
        until = [until]
    if not isinstance(until, (list, tuple)):
        raise VRHError(f"generation kwarg until={until!r}: expected a string or a list of strings")
    gen = {k: gen_kwargs[k] for k in GEN_KEYS if gen_kwargs.get(k) is not None}
    gen.setdefault("max_new_tokens", default_max_new_tokens)
    gen.setdefault("num_beams", 1)
    temperature = float(gen.pop("temperature", 0) or 0)
    if temperature > 0:
        gen.update(do_sample=True, temperature=temperature)
    else:
        gen["do_sample"] = False
        gen.pop("top_p", None)
        gen.pop("top_k", None)
    return [u for u in until if u], gen


def cut_at_until(text: str, until: Sequence[str]) -> str:
    for term in until:
        text = text.split(term)[0]
    return text


class VRHOwnBackend(lmms):
    """Base of our own simple backends; subclasses implement `load_model`, `load_processor`, `build_inputs`."""

    is_simple = True
    backend_name = "vrh"
    default_dtype = torch.bfloat16
    default_max_new_tokens = 128
    max_batch_size: int | None = None  # a family whose processor cannot pad a batch sets 1
    skip_special_tokens = True
    remote_code = False  # default of the trust_remote_code model arg

    def __init__(self, pretrained: str, device: str | None = "cuda", device_map: str | None = "auto",
                 batch_size: int | str = 1, trust_remote_code: bool | None = None,
                 attn_implementation: str | None = None, max_new_tokens: int | None = None, **kwargs: Any) -> None:
        super().__init__()
        if kwargs:
            raise VRHError(f"{self.backend_name}: unknown model arg(s) {', '.join(sorted(kwargs))}")
        self.pretrained = str(pretrained)
        self.batch_size_per_gpu = int(batch_size)
        if self.batch_size_per_gpu < 1:
            raise VRHError(f"{self.backend_name}: batch_size must be >= 1, got {batch_size}")
        if self.max_batch_size is not None and self.batch_size_per_gpu > self.max_batch_size:
            raise VRHError(f"{self.backend_name}: batch_size {self.batch_size_per_gpu} is not supported "
                           f"(at most {self.max_batch_size})")
        if max_new_tokens is not None:
            self.default_max_new_tokens = int(max_new_tokens)
        self.trust_remote_code = self.remote_code if trust_remote_code is None else bool(trust_remote_code)
        accelerator = Accelerator()
        self.accelerator = accelerator
        if accelerator.num_processes > 1:
            self._device = torch.device(f"cuda:{accelerator.local_process_index}")
            self.device_map = f"cuda:{accelerator.local_process_index}"
        else:
            self._device = torch.device(device or "cpu")
            self.device_map = device_map or str(self._device)
        load_kwargs: dict[str, Any] = {"dtype": self.default_dtype, "device_map": self.device_map}
        if attn_implementation is not None:
            load_kwargs["attn_implementation"] = attn_implementation
        self._model = self.load_model(self.pretrained, **load_kwargs).eval()
        self.processor = self.load_processor(self.pretrained)
        self._tokenizer = getattr(self.processor, "tokenizer", self.processor)
        self._config = self._model.config
        if accelerator.num_processes > 1:
            if accelerator.distributed_type not in (DistributedType.MULTI_GPU, DistributedType.FSDP):
                raise VRHError(f"{self.backend_name}: distributed type {accelerator.distributed_type} is not "
                               f"supported; use data parallelism (DDP) or FSDP")
            if accelerator.distributed_type == DistributedType.FSDP:
                self._model = accelerator.prepare(self._model)
            else:
                self._model = accelerator.prepare_model(self._model, evaluation_mode=True)
            self._rank = accelerator.local_process_index
            self._world_size = accelerator.num_processes
        else:
            self._rank, self._world_size = 0, 1

    # -------------------------------------------------------------------------------- family-specific parts
    def load_model(self, pretrained: str, **kwargs: Any) -> torch.nn.Module:
        raise NotImplementedError

    def load_processor(self, pretrained: str) -> Any:
        raise NotImplementedError

    def build_inputs(self, contexts: list[str], images: list[list[Image.Image]]) -> dict[str, Any]:
        """Model inputs for a batch: one prompt and its images per sample, left padded when len > 1."""
        raise NotImplementedError

    def prompt_length(self, inputs: dict[str, Any]) -> int:
        """How many leading tokens of `generate`'s output are the (padded) prompt."""
        return int(inputs["input_ids"].shape[1])

    def decode(self, new_tokens: torch.Tensor) -> list[str]:
        return self.tokenizer.batch_decode(new_tokens, skip_special_tokens=self.skip_special_tokens)

    # ------------------------------------------------------------------------------ lmms-eval properties
    @property
    def config(self):
        return self._config

    @property
    def tokenizer(self):
        return self._tokenizer

    @property
    def model(self) -> torch.nn.Module:
        return self.accelerator.unwrap_model(self._model)

    @property
    def eot_token_id(self) -> int | None:
        return self.tokenizer.eos_token_id

    @property
    def batch_size(self) -> int:
        return self.batch_size_per_gpu

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world_size

    # --------------------------------------------------------------------------------------- generation
    def to_model(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Tensors onto the model's device; floating tensors (pixels) in the model's dtype."""
        device, dtype = self.model.device, self.model.dtype
        out = {}
        for key, value in inputs.items():
            if isinstance(value, torch.Tensor):
                value = value.to(device=device, dtype=dtype) if value.is_floating_point() else value.to(device)
            out[key] = value
        return out

    def images_of(self, doc_to_visual: Callable, task: str, split: str, doc_id: int) -> list[Image.Image]:
        visuals = doc_to_visual(self.task_dict[task][split][doc_id]) or []
        if not isinstance(visuals, (list, tuple)):
            visuals = [visuals]
        images = []
        for v in visuals:
            if v is None:
                continue
            if not isinstance(v, Image.Image):
                raise VRHError(f"{self.backend_name}: task {task} doc {doc_id} gives a {type(v).__name__} visual; "
                               f"this backend takes images only")
            images.append(v.convert("RGB"))
        return images

    def generation_ids(self, gen: dict[str, Any]) -> dict[str, Any]:
        tok = self.tokenizer
        ids = {}
        if tok.eos_token_id is not None:
            ids["eos_token_id"] = tok.eos_token_id
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        if pad is not None:
            ids["pad_token_id"] = pad
        return {**ids, **gen}

    def generate_until(self, requests: list[Instance]) -> list[str]:
        res: list[str] = []
        collator = utils.Collator([r.args for r in requests], lambda x: (-len(x[0]), x[0]), grouping=True)
        pbar = tqdm(total=len(requests), disable=(self.rank != 0), desc="Model Responding")
        for chunk in collator.get_batched(n=self.batch_size, batch_fn=None):
            contexts, all_gen_kwargs, doc_to_visual, doc_id, task, split = zip(*chunk)
            images = [self.images_of(doc_to_visual[i], task[i], split[i], doc_id[i]) for i in range(len(chunk))]
            until, gen = split_gen_kwargs(dict(all_gen_kwargs[0]), self.default_max_new_tokens)
            inputs = self.to_model(self.build_inputs(list(contexts), images))
            with torch.inference_mode():
                out = self.model.generate(**inputs, **self.generation_ids(gen))
            answers = [cut_at_until(a, until) for a in self.decode(out[:, self.prompt_length(inputs):])]
            for ctx, gen_kwargs, answer in zip(contexts, all_gen_kwargs, answers):
                res.append(answer)
                self.cache_hook.add_partial("generate_until", (ctx, gen_kwargs), answer)
                pbar.update(1)
        pbar.close()
        return collator.get_original(res)

    def loglikelihood(self, requests: list[Instance]) -> list[tuple[float, bool]]:
        raise NotImplementedError(f"{self.backend_name} supports generate_until tasks only")

    def generate_until_multi_round(self, requests: list[Instance]) -> list[str]:
        raise NotImplementedError(f"{self.backend_name} supports single-round generate_until tasks only")
