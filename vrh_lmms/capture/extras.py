"""What each layout needs from a processor and its output, for one sample (one image per sample).

`layout_extras(family, processor, batch, index)` reads the processor's own settings (tile size, merge size, grid
pinpoints, tokens per tile, image token id) so layouts follow whatever the checkpoint's processor config says,
rather than the real-model defaults.
"""

from __future__ import annotations

from typing import Any

from vrh_lmms.capture.layouts import layout_name
from vrh_lmms.errors import VRHError


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


def layout_extras(family: str, processor: Any, batch: Any, index: int = 0) -> dict[str, Any]:
    """Extras for `image_token_map` for sample `index` of a processor output `batch` (one image per sample)."""
    name = layout_name(family)
    ip = getattr(processor, "image_processor", None)
    out: dict[str, Any] = {"image_token_id": _token_id(processor)}
    if name in ("qwen2_5_vl", "qwen3_vl", "glm4v"):
        out.update(image_grid_thw=_row(batch, "image_grid_thw", index), patch_size=int(ip.patch_size),
                   merge_size=int(ip.merge_size))
    elif name == "internvl":
        kwargs = getattr(processor, "images_kwargs", {}) or {}
        out.update(tile_size=int(_get(ip.size, "height")), tokens_per_tile=int(processor.image_seq_length),
                   min_patches=int(ip.min_patches), max_patches=int(ip.max_patches),
                   crop_to_patches=bool(kwargs.get("crop_to_patches", ip.crop_to_patches)))
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
    elif name == "deepseek_vl2":
        out.update(image_size=int(processor.image_size), patch_size=int(processor.patch_size),
                   downsample_ratio=int(processor.downsample_ratio),
                   candidate_resolutions=[list(c) for c in processor.candidate_resolutions])
    return out
