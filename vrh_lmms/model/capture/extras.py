"""What each layout needs from a processor and its output, for one sample (one image per sample).

`layout_extras(family, processor, batch, index, backend)` reads the processor's own settings (tile size, merge
size, grid pinpoints, tokens per tile, image token id) so layouts follow whatever the checkpoint's processor config
says, rather than the real-model defaults, and the settings the backend passes with every processor call over
them (lmms-eval's internvl_hf: `min_patches` / `max_patches` model args). lmms-eval's remote-code InternVL
backends have no HF processor: `RemoteInternVLProcessor.from_backend` describes their own tiling instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model.capture.layouts import layout_name


def _get(obj: Any, key: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(key)
    return getattr(obj, key, None)


def _token_id(processor: Any, attr: str = "image_token") -> int:
    tid = getattr(processor, f"{attr}_id", None)
    if isinstance(tid, int):
        return tid
    tok = getattr(processor, attr, None) or getattr(processor.tokenizer, attr, None)
    if tok is None:
        raise VRHError(f"{type(processor).__name__} names no {attr}")
    return int(processor.tokenizer.convert_tokens_to_ids(tok))


def _row(batch: Any, key: str, index: int) -> Any:
    value = batch.get(key) if hasattr(batch, "get") else None
    if value is None:
        raise VRHError(f"processor output lacks {key!r}, which this layout needs")
    return value[index].tolist() if hasattr(value[index], "tolist") else value[index]


def _call_setting(backend: Any, key: str) -> int | None:
    """A processor-call setting the backend passes on every call (None: it passes none, the config applies)."""
    value = getattr(backend, key, None) if backend is not None else None
    return None if value is None else int(value)


# lmms-eval 0.7.3 remote-code InternVL backends -> (candidate order of their dynamic_preprocess, tiles cap rule)
_REMOTE_INTERNVL = {("lmms_eval.models.simple.internvl3", "InternVL3"): "set",
                    ("lmms_eval.models.simple.internvl2", "InternVL2"): "sorted"}


@dataclass
class RemoteInternVLProcessor:
    """The processor surface `layout_extras` reads, for lmms-eval's remote-code InternVL backends (internvl2,
    internvl3, internvl3_5), which tile with their own `dynamic_preprocess` and have no HF processor."""

    tokenizer: Any
    tile_size: int
    image_seq_length: int
    max_patches: int
    vrh_tiling: str  # "set" (internvl3 / 3_5) or "sorted" (internvl2)
    min_patches: int = 1
    image_token: str = "<IMG_CONTEXT>"
    images_kwargs: dict = field(default_factory=lambda: {"crop_to_patches": True})

    @property
    def image_processor(self) -> SimpleNamespace:
        return SimpleNamespace(size={"height": self.tile_size, "width": self.tile_size},
                               min_patches=self.min_patches, max_patches=self.max_patches, crop_to_patches=True)

    @classmethod
    def from_backend(cls, backend: Any) -> RemoteInternVLProcessor:
        """Read tile size and tokens per tile from the loaded InternVLChatModel, the tiles cap from the backend."""
        order = next((o for c in type(backend).__mro__ for key, o in _REMOTE_INTERNVL.items()
                      if (c.__module__, c.__name__) == key), None)
        if order is None:
            raise VRHError(f"{type(backend).__name__} is not one of lmms-eval's remote-code InternVL backends")
        model = backend.model
        cfg = model.config
        vision = getattr(cfg, "vision_config", None)
        tile = getattr(cfg, "force_image_size", None) or getattr(vision, "image_size", None)
        tokens = getattr(model, "num_image_token", None)
        if tokens is None and tile and getattr(vision, "patch_size", None):
            tokens = int((int(tile) // int(vision.patch_size)) ** 2 * float(cfg.downsample_ratio) ** 2)
        if not tile or not tokens:
            raise VRHError(f"{type(model).__name__} config names no image size / tokens per tile")
        if order == "set":  # internvl3: max(1, min(max_num, total_max_num // n_images)), one image per sample
            cap = max(1, min(int(backend.max_num), int(backend.total_max_num)))
        else:  # internvl2: load_image(visual) with its default max_num=6
            cap = 6
        return cls(backend.tokenizer, int(tile), int(tokens), cap, order)


def _magma_token_id(processor: Any, backend: Any) -> int:
    """MagmaProcessor names no image token: the model config's `image_token_index` (128257 in Magma-8B), else the
    id the tokenizer gives the `<image>` the backend's prompt writes."""
    config = getattr(getattr(backend, "model", None), "config", None)
    tid = getattr(config, "image_token_index", None)
    if isinstance(tid, int):
        return tid
    tid = processor.tokenizer.convert_tokens_to_ids("<image>")
    if not isinstance(tid, int) or tid == getattr(processor.tokenizer, "unk_token_id", None):
        raise VRHError("Magma tokenizer has no <image> token and no model config names image_token_index")
    return tid


def _magma_extras(processor: Any, batch: Any, index: int) -> dict[str, Any]:
    """MagmaImageProcessor's crop size and strategy, and the sample's (rows, cols) crop grid from `image_sizes`
    ((images, 2) from the processor, (batch, images, 2) once the backend adds the batch axis)."""
    ip = processor.image_processor
    sizes = _row(batch, "image_sizes", index)
    grids = [sizes] if sizes and not isinstance(sizes[0], list) else [g for g in sizes if sum(g) > 0]
    if len(grids) != 1:
        raise VRHError(f"Magma sample {index} has {len(grids)} images; layouts cover one image per sample")
    return {"image_sizes": [int(v) for v in grids[0]], "crop_size": int(ip.base_img_size),
            "anyres_strategy": str(getattr(ip, "anyres_strategy", "crop"))}


def _llava_extras(processor: Any, ip: Any) -> dict[str, Any]:
    """LLaVA-1.5: CLIPImageProcessor's centre crop, or LlavaImageProcessor's pad-to-square (then the resize size)."""
    crop_on = bool(getattr(ip, "do_center_crop", False))
    square = _get(ip.crop_size, "height") if crop_on else None
    square = int(square or _get(ip.size, "height") or _get(ip.size, "shortest_edge"))
    return {"crop_size": square, "base_side": square // int(processor.patch_size),
            "shortest_edge": _get(ip.size, "shortest_edge"), "do_pad": bool(getattr(ip, "do_pad", False)),
            "do_center_crop": crop_on}


def _onevision_extras(processor: Any, ip: Any) -> dict[str, Any]:
    """LLaVA-OneVision: tile size, features per tile side, pinpoints, pooling cap."""
    return {"tile_size": int(_get(ip.size, "height")), "base_side": math.isqrt(int(processor.num_image_tokens)),
            "grid_pinpoints": [list(p) for p in ip.image_grid_pinpoints],
            "vision_aspect_ratio": str(processor.vision_aspect_ratio)}


def _gemma3_extras(processor: Any, ip: Any) -> dict[str, Any]:
    """Gemma 3: the soft image tokens (not `processor.image_token_id`, which is <start_of_image>), tokens per image
    and the pan-and-scan settings the processor passes on every call (its class defaults)."""
    call = dict(getattr(processor, "images_kwargs", None) or {})
    keys = ("pan_and_scan_min_crop_size", "pan_and_scan_max_num_crops", "pan_and_scan_min_ratio_to_activate")
    return {"image_token_id": int(processor.tokenizer.image_token_id),
            "tokens_per_image": int(processor.image_seq_length), **{k: call.get(k) for k in keys}}


_CROP_LAYOUTS = {"llava": _llava_extras, "llava_onevision": _onevision_extras, "gemma3": _gemma3_extras}


def layout_extras(family: str, processor: Any, batch: Any, index: int = 0, backend: Any = None) -> dict[str, Any]:
    """Extras for `image_token_map` for sample `index` of a processor output `batch` (one image per sample).

    `backend`: the lmms-eval model that ran the processor, whose per-call settings override the processor's."""
    name = layout_name(family)
    ip = getattr(processor, "image_processor", None)
    out: dict[str, Any] = {"image_token_id": _magma_token_id(processor, backend) if name == "magma"
                           else _token_id(processor)}
    if name in ("qwen2_5_vl", "qwen3_vl", "glm4v"):
        out.update(image_grid_thw=_row(batch, "image_grid_thw", index), patch_size=int(ip.patch_size),
                   merge_size=int(ip.merge_size))
    elif name == "internvl":
        kwargs = getattr(processor, "images_kwargs", {}) or {}
        lo, hi = _call_setting(backend, "min_patches"), _call_setting(backend, "max_patches")
        out.update(tile_size=int(_get(ip.size, "height")), tokens_per_tile=int(processor.image_seq_length),
                   min_patches=int(ip.min_patches) if lo is None else lo,
                   max_patches=int(ip.max_patches) if hi is None else hi,
                   crop_to_patches=bool(kwargs.get("crop_to_patches", ip.crop_to_patches)),
                   tiling=getattr(processor, "vrh_tiling", "hf"))
    elif name == "llava_next":
        tile = int(_get(ip.crop_size, "height") or _get(ip.size, "shortest_edge"))
        out.update(tile_size=tile, base_side=tile // int(processor.patch_size),
                   grid_pinpoints=[list(p) for p in ip.image_grid_pinpoints],
                   vision_feature_select_strategy=processor.vision_feature_select_strategy)
    elif name == "paligemma":
        pass
    elif name == "deepseek_vl":
        out.update(image_size=int(_get(ip.size, "height")), min_size=int(getattr(ip, "min_size", 14)))
    elif name == "idefics3":
        out.update(tokens_per_tile=int(processor.image_seq_len), longest_edge=int(_get(ip.size, "longest_edge")),
                   tile_size=int(_get(ip.max_image_size, "longest_edge")),
                   do_image_splitting=bool(ip.do_image_splitting))
    elif name == "phi4_multimodal":
        out.update(crop_size=int(_get(ip.size, "height")), patch_size=int(ip.patch_size),
                   dynamic_hd=int(getattr(ip, "dynamic_hd", 36)))
    elif name == "magma":
        out.update(_magma_extras(processor, batch, index))
    elif name in _CROP_LAYOUTS:
        out.update(_CROP_LAYOUTS[name](processor, ip))
    elif name == "llama4":  # <|patch|> placeholders (processor.image_token is the global view's <|image|>)
        out.update(image_token_id=int(processor.tokenizer.convert_tokens_to_ids(processor.img_patch_token)),
                   tile_size=int(_get(ip.size, "height")), max_patches=int(ip.max_patches),
                   resize_to_max_canvas=bool(ip.resize_to_max_canvas),
                   tokens_per_tile=(int(_get(ip.size, "height")) // int(processor.patch_size)) ** 2
                   // int(processor.downsample_ratio))
    elif name == "mistral3":  # Pixtral: the resized (height, width) of the sample's image, px per token
        out.update(image_size_hw=[int(v) for v in _row(batch, "image_sizes", index)],
                   token_px=int(processor.patch_size) * int(processor.spatial_merge_size))
    elif name == "deepseek_vl2":
        out.update(image_size=int(processor.image_size), patch_size=int(processor.patch_size),
                   downsample_ratio=int(processor.downsample_ratio),
                   candidate_resolutions=[list(c) for c in processor.candidate_resolutions])
    elif name in _POOLED_LAYOUTS:
        out.update(_POOLED_LAYOUTS[name](processor, ip))
    elif name == "gemma4":  # the soft-token budget the backend passes on every call (lmms-eval's: 280) wins
        budget = _call_setting(backend, "max_soft_tokens")
        out.update(patch_size=int(ip.patch_size), pooling_kernel_size=int(ip.pooling_kernel_size),
                   max_soft_tokens=int(ip.max_soft_tokens) if budget is None else budget)
    return out


def _molmo2_extras(processor: Any, ip: Any) -> dict[str, Any]:
    """Molmo 2: the `<im_patch>` tokens (processor.image_token is the prompt's `<|image|>`), crop and tiling
    settings."""
    return {"image_token_id": int(processor.tokenizer.convert_tokens_to_ids("<im_patch>")),
            "crop_size": int(_get(ip.size, "height")), "patch_size": int(ip.patch_size),
            "max_crops": int(ip.max_crops), "overlap_margins": [int(v) for v in ip.overlap_margins],
            "pooling_size": [int(v) for v in ip.pooling_size]}


def _minicpmv_extras(processor: Any, ip: Any) -> dict[str, Any]:
    """MiniCPM-V 4.6: slicing and downsampling settings."""
    return {"scale_resolution": int(ip.scale_resolution), "patch_size": int(ip.patch_size),
            "max_slice_nums": int(ip.max_slice_nums), "slice_mode": bool(ip.slice_mode),
            "downsample_mode": str(ip.downsample_mode)}


# pooled layouts, each with its extras reader
_POOLED_LAYOUTS = {"molmo2": _molmo2_extras, "minicpmv": _minicpmv_extras}
