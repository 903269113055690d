"""The `video` evidence kind: a span of a source video's time -> the tokens of the temporal groups that show it.

`vrh_evidence = {"kind": "video", "seconds": [t0, t1]}` (optional `"index": v`, the doc's v-th video, 0-based;
`"query"`, the question's words for the `in` rows). The doc names its videos in `vrh_videos` (paths, visual order).
Evidence: every token of each temporal group holding a fed frame whose time is in [t0, t1]; media: every video
token. The fed frames are the backend's own sampling (vrh_lmms.model.capture.video), checked against `video_grid_thw`; a
span holding no fed frame is refused, naming the fed frames' times. Qwen2.5-VL lays a video out as one token run,
Qwen3-VL as one block per temporal group.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model.capture.video import fed_frames, probe, video_layouts
from vrh_lmms.runs.discovery.evidence import EvidenceKeys, EvidenceKind, KeyContext, register_evidence
from vrh_lmms.runs.discovery.targets import doc_image_id

KIND_VIDEO = "video"
FAMILIES = ("qwen2_5_vl", "qwen3_vl")  # families whose video layout vrh_lmms.model.capture.video reproduces


@dataclass(frozen=True)
class VideoTarget:
    videos: tuple[str, ...]
    index: int
    seconds: tuple[float, float]
    expression: str
    image_id: str
    image_size: None = None  # no single image's layout


def doc_videos(doc: Mapping[str, Any], where: str) -> tuple[str, ...]:
    videos = doc.get("vrh_videos")
    if isinstance(videos, str):
        videos = [videos]
    if not videos or not all(isinstance(v, str) and v for v in videos):
        raise VRHError(f"{where}: video evidence needs `vrh_videos`, the doc's video paths in visual order")
    return tuple(videos)


def video_target(doc: Mapping[str, Any], where: str) -> VideoTarget:
    ev = doc["vrh_evidence"]
    seconds = ev.get("seconds")
    if (not isinstance(seconds, (list, tuple)) or len(seconds) != 2
            or not all(isinstance(s, (int, float)) and not isinstance(s, bool) for s in seconds)
            or not 0 <= seconds[0] <= seconds[1]):
        raise VRHError(f"{where}: vrh_evidence of kind video needs `seconds` [t0, t1] with 0 <= t0 <= t1, "
                       f"got {seconds!r}")
    videos = doc_videos(doc, where)
    index = ev.get("index", 0)
    if not isinstance(index, int) or not 0 <= index < len(videos):
        raise VRHError(f"{where}: vrh_evidence index {index!r} is not one of the doc's {len(videos)} videos")
    return VideoTarget(videos, index, (float(seconds[0]), float(seconds[1])), str(ev.get("query") or ""),
                       doc_image_id(doc))


def video_keys(target: VideoTarget, ctx: KeyContext) -> EvidenceKeys:
    if ctx.family not in FAMILIES:
        raise VRHError(f"video evidence has no layout for family {ctx.family}; supported: {', '.join(FAMILIES)}")
    grid = ctx.tensors.get("video_grid_thw")
    if grid is None:
        raise VRHError(f"the backend fed no video for {target.image_id}; video evidence needs one")
    vp = ctx.processor.video_processor
    sources = [probe(path) for path in target.videos]
    fed = fed_frames(ctx.backend, sources)
    token_id = ctx.tokenizer.convert_tokens_to_ids(getattr(ctx.processor, "video_token", "<|video_pad|>"))
    layouts = video_layouts(ctx.prompt_ids, token_id, grid, vp.merge_size, vp.temporal_patch_size, fed,
                            [s.fps for s in sources], run_per_group=ctx.family == "qwen3_vl")
    layout, (t0, t1) = layouts[target.index], target.seconds
    source = sources[target.index]
    if t1 > source.duration + 1e-6:
        raise VRHError(f"video evidence span [{t0:g}, {t1:g}] s ends past {source.path} ({source.duration:g} s)")
    groups = layout.groups_in(t0, t1)
    if not groups:
        times = ", ".join(f"{t:g}" for t in layout.frame_seconds())
        raise VRHError(f"video evidence span [{t0:g}, {t1:g}] s holds no fed frame of {source.path} "
                       f"(fed frames at {times} s)")
    evidence = torch.zeros(ctx.seq_len, dtype=torch.bool)
    for g in groups:
        evidence[list(layout.group_positions(g))] = True
    media = torch.zeros(ctx.seq_len, dtype=torch.bool)
    for lay in layouts:
        media[lay.positions()] = True
    return EvidenceKeys(evidence, media)


VIDEO = register_evidence(EvidenceKind(KIND_VIDEO, video_target, video_keys, grid=False,
                                       doc="a span of a video's time (seconds): its temporal groups' tokens"))
