"""Video layout for Qwen2.5-VL through lmms-eval's `qwen2_5_vl` backends: which source frames the backend feeds, and
which prompt tokens hold each of them.

A video is one `<|vision_start|><|video_pad|>...<|vision_end|>` block. The video processor stacks the fed frames in
temporal groups of `temporal_patch_size` (2; an odd count is padded by repeating the last frame), so `video_grid_thw`
is (groups, h, w) patches and each group is `h * w / merge**2` consecutive tokens, row-major over the merged grid
(Qwen2VLVideoProcessor.patchify). A group is the merge of its frames: its tokens cover its frames' times.

Which source frames are fed is the backend's choice, reproduced here from lmms-eval 0.7.3 (read, not guessed):
- simple (`VRHQwen25`, lmms-eval's simple `qwen2_5_vl`): qwen_vl_utils reads the video at its default 2 fps
  (`smart_nframes`, frames `linspace(0, n - 1, k).round()`), then the backend keeps
  `unique(linspace(0, k - 1, max_num_frames, int))` of those plus the last one; its `fps` option is not used.
- chat (`VRHQwen25Chat`, what `--model vrh_qwen25` resolves to): qwen_vl_utils with `fps` when the backend has one,
  else `nframes` = min(max_num_frames, total) floored to even (at least 2); no further subsampling.
Source frame i's time is i / fps (the container's average fps, as decord reports it; qwen_vl_utils reads with
decord when torchcodec is absent).

Qwen3-VL (`vrh_qwen3`): its processor writes each temporal group as its own `<t.t seconds><|vision_start|>` +
h*w/merge^2 `<|video_pad|>` + `<|vision_end|>` block, t being the mean of the group's first and last frame's times
(Qwen3VLProcessor._calculate_timestamps); its backends pass `nframes` / `fps` / `max_frames` to qwen_vl_utils
(`qwen3_backend_frames`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import decord
import numpy as np
import torch
from qwen_vl_utils import vision_process as vp
from qwen_vl_utils.vision_process import smart_nframes
from transformers.models.qwen2_vl.video_processing_qwen2_vl import smart_resize

from vrh_lmms.base.errors import VRHError

VIDEO_SUFFIXES = (".mp4", ".avi", ".mov")  # the simple backend treats only these paths as videos
EPS = 1e-6  # seconds: a frame time on a span's edge is inside it


@dataclass(frozen=True)
class SourceVideo:
    """A video file as the backend's reader sees it."""

    path: str
    total_frames: int
    fps: float
    height: int
    width: int

    @property
    def duration(self) -> float:
        return self.total_frames / self.fps


def probe(path: str) -> SourceVideo:
    """Frame count, average fps and frame size by decord (the reader the backends use); a missing file is refused."""
    if not os.path.isfile(path):
        raise VRHError(f"video file {path} does not exist")
    try:
        reader = decord.VideoReader(path)
        height, width = reader[0].shape[:2]
        return SourceVideo(path, len(reader), float(reader.get_avg_fps()), int(height), int(width))
    except decord.DECORDError as exc:
        raise VRHError(f"video file {path} cannot be read ({str(exc).splitlines()[0]})") from None


def qwen_vl_utils_indices(total: int, fps: float, ele: dict[str, Any]) -> list[int]:
    """The source frames qwen_vl_utils' decord reader returns for a video element (`fps` or `nframes` keys)."""
    n = smart_nframes(dict(ele), total_frames=total, video_fps=fps)
    return torch.linspace(0, total - 1, n).round().long().tolist()


def simple_backend_frames(total: int, fps: float, max_num_frames: int) -> list[int]:
    """Source frames lmms-eval's simple qwen2_5_vl backend feeds (qwen_vl_utils at 2 fps, then its own subsample)."""
    first = qwen_vl_utils_indices(total, fps, {})
    k = len(first)
    keep = np.unique(np.linspace(0, k - 1, max_num_frames, dtype=int))
    if k - 1 not in keep:
        keep = np.unique(np.append(keep, k - 1))
    return [first[int(i)] for i in keep]


def chat_backend_frames(total: int, fps: float, max_num_frames: int, backend_fps: float | None,
                        first_total: int | None = None) -> list[int]:
    """Source frames lmms-eval's chat qwen2_5_vl backend feeds; without `fps` its nframes comes from the request's
    first video (`first_total` frames; "Assume batch size 1 for videos") and applies to every video."""
    if backend_fps is not None:
        return qwen_vl_utils_indices(total, fps, {"fps": backend_fps})
    nframes = max(2, (min(max_num_frames, total if first_total is None else first_total) // 2) * 2)
    return qwen_vl_utils_indices(total, fps, {"nframes": nframes})


def qwen3_backend_frames(backend: Any, video: SourceVideo) -> list[int]:
    """Source frames lmms-eval's qwen3_vl backends feed (`_build_video_kwargs`): `fps` + max_frames when the backend
    has an fps, else max_frames alone with `total_pixels`, else nframes = max_num_frames (the simple backend caps it
    at the clip's frame count; the chat one does not)."""
    max_num_frames = int(getattr(backend, "max_num_frames", 32))
    if getattr(backend, "fps", None) is not None:
        ele: dict[str, Any] = {"fps": backend.fps, "max_frames": max_num_frames}
    elif getattr(backend, "total_pixels", None) is not None:
        ele = {"max_frames": max_num_frames}
    else:
        simple = getattr(backend, "is_simple", True)
        ele = {"nframes": min(max_num_frames, video.total_frames) if simple else max_num_frames}
    return qwen_vl_utils_indices(video.total_frames, video.fps, ele)


def backend_frames(backend: Any, video: SourceVideo) -> list[int]:
    """The source frames this backend instance feeds for `video`, the request's only video."""
    return fed_frames(backend, [video])[0]


def fed_frames(backend: Any, videos: Sequence[SourceVideo]) -> list[list[int]]:
    """The source frames this backend instance feeds for each of one request's videos (its family, simple or chat
    path, its settings). Qwen2.5-VL's backends treat the first video apart: the simple one subsamples only it to
    max_num_frames, the chat one sizes every video's nframes by it."""
    if getattr(backend, "vrh_family", "qwen2_5_vl") == "qwen3_vl":
        return [qwen3_backend_frames(backend, v) for v in videos]
    max_num_frames = int(getattr(backend, "max_num_frames", 32))
    if getattr(backend, "is_simple", True):
        return [simple_backend_frames(v.total_frames, v.fps, max_num_frames) if i == 0
                else qwen_vl_utils_indices(v.total_frames, v.fps, {}) for i, v in enumerate(videos)]
    first = videos[0].total_frames if videos else None
    return [chat_backend_frames(v.total_frames, v.fps, max_num_frames, getattr(backend, "fps", None), first)
            for v in videos]


def qwen_vl_utils_frame_size(height: int, width: int, nframes: int, min_pixels: int | None,
                             max_pixels: int | None, patch_size: int = 14) -> tuple[int, int]:
    """(h, w) qwen_vl_utils' fetch_video resizes `nframes` read frames to (its per-frame pixel budget)."""
    factor = patch_size * vp.SPATIAL_MERGE_SIZE
    lo = min_pixels if min_pixels is not None else vp.VIDEO_MIN_TOKEN_NUM * factor * factor
    total_pixels = vp.MODEL_SEQ_LEN * factor * factor * 0.9
    hi = max(min(vp.VIDEO_MAX_TOKEN_NUM * factor * factor, total_pixels / nframes * vp.FRAME_FACTOR), int(lo * 1.05))
    hi = min(max_pixels, hi) if max_pixels is not None else hi
    return vp.smart_resize(height, width, factor=factor, min_pixels=lo, max_pixels=hi)


def predicted_grid(video: SourceVideo, fed: Sequence[int], read: int, video_processor: Any,
                   min_pixels: int | None, max_pixels: int | None) -> tuple[int, int, int]:
    """(t, h, w) the processor will report: qwen_vl_utils' resize of the `read` frames, then the video processor's
    own smart_resize (its `size` limits) and patching; `fed` frames padded to the temporal patch."""
    p, m, tp = video_processor.patch_size, video_processor.merge_size, video_processor.temporal_patch_size
    h, w = qwen_vl_utils_frame_size(video.height, video.width, read, min_pixels, max_pixels, patch_size=p)
    size = video_processor.size
    h, w = smart_resize(h, w, factor=p * m, min_pixels=size.shortest_edge, max_pixels=size.longest_edge)
    return math.ceil(len(fed) / tp), h // p, w // p


def backend_grid(backend: Any, video: SourceVideo) -> tuple[int, int, int]:
    """(t, h, w) patches a Qwen2.5-VL backend's processor will report for `video`, the request's only video (its
    sampling and pixel limits)."""
    fed = backend_frames(backend, video)
    # qwen_vl_utils sizes frames by the count it read: the simple backend subsamples only afterwards
    simple = getattr(backend, "is_simple", True)
    read = len(qwen_vl_utils_indices(video.total_frames, video.fps, {})) if simple else len(fed)
    return predicted_grid(video, fed, read, backend.processor.video_processor,
                          getattr(backend, "min_pixels", None), getattr(backend, "max_pixels", None))


@dataclass(frozen=True)
class VideoLayout:
    """One video's tokens in the prompt: `starts` (each temporal group's first `<|video_pad|>` position), `grid`
    (t, h, w) patches, the fed source frames in order and the source fps."""

    starts: tuple[int, ...]
    grid: tuple[int, int, int]
    merge: int
    temporal: int
    frames: tuple[int, ...]
    fps: float

    @property
    def per_group(self) -> int:
        return self.grid[1] * self.grid[2] // self.merge ** 2

    @property
    def n_tokens(self) -> int:
        return self.grid[0] * self.per_group

    def group_frames(self, g: int) -> tuple[int, ...]:
        """Source frames merged in group g (a padded last group repeats the last frame)."""
        own = self.frames[g * self.temporal:(g + 1) * self.temporal]
        return own + (own[-1],) * (self.temporal - len(own))

    def group_seconds(self, g: int) -> tuple[float, float]:
        frames = self.group_frames(g)
        return frames[0] / self.fps, frames[-1] / self.fps

    def group_stamp(self, g: int) -> float:
        """The time Qwen3-VL's processor writes before group g: the mean of its first and last frame's times."""
        return sum(self.group_seconds(g)) / 2

    def group_positions(self, g: int) -> range:
        return range(self.starts[g], self.starts[g] + self.per_group)

    def positions(self) -> list[int]:
        return [p for g in range(self.grid[0]) for p in self.group_positions(g)]

    def frame_seconds(self) -> list[float]:
        return [f / self.fps for f in self.frames]

    def groups_in(self, t0: float, t1: float) -> list[int]:
        """Groups holding a fed frame whose time lies in [t0, t1]."""
        return sorted({i // self.temporal for i, t in enumerate(self.frame_seconds()) if t0 - EPS <= t <= t1 + EPS})


def token_runs(ids: torch.Tensor, token_id: int) -> list[tuple[int, int]]:
    """(start, length) of each maximal run of `token_id` in `ids`."""
    flags = (ids.cpu() == token_id).tolist()
    runs, i = [], 0
    while i < len(flags):
        if flags[i]:
            j = i
            while j < len(flags) and flags[j]:
                j += 1
            runs.append((i, j - i))
            i = j
        else:
            i += 1
    return runs


def video_layouts(prompt_ids: torch.Tensor, video_token_id: int, grid_thw: torch.Tensor, merge: int, temporal: int,
                  frames: Sequence[Sequence[int]], fps: Sequence[float],
                  run_per_group: bool = False) -> list[VideoLayout]:
    """Each video's layout, checked against what the processor built: t groups for the fed frames (else the sampling
    reproduced is not the backend's) and, per `video_grid_thw` row, one run of t*h*w/merge^2 tokens (Qwen2.5-VL) or,
    with `run_per_group` (Qwen3-VL: a timestamp and a vision start/end around each group), t runs of h*w/merge^2."""
    runs = token_runs(prompt_ids, video_token_id)
    grids = [tuple(int(v) for v in row) for row in grid_thw.tolist()]
    if len(grids) != len(frames):
        raise VRHError(f"video_grid_thw has {len(grids)} rows but {len(frames)} videos were sampled")
    need = sum(g[0] for g in grids) if run_per_group else len(grids)
    if len(runs) != need:
        raise VRHError(f"the prompt has {len(runs)} video token runs, video_grid_thw needs {need}; "
                       f"cannot map video tokens")
    out, at = [], 0
    for v, (grid, fed, rate) in enumerate(zip(grids, frames, fps)):
        per = grid[1] * grid[2] // merge ** 2
        mine = runs[at:at + grid[0]] if run_per_group else [(runs[at][0] + g * per, per) for g in range(grid[0])]
        whole = sum(n for _, n in runs[at:at + grid[0]]) if run_per_group else runs[at][1]
        at += grid[0] if run_per_group else 1
        layout = VideoLayout(tuple(s for s, _ in mine), grid, merge, temporal, tuple(int(f) for f in fed), float(rate))
        if layout.n_tokens != whole or any(n != per for _, n in mine):
            raise VRHError(f"video {v}: {whole} tokens in the prompt, video_grid_thw {grid} gives {layout.n_tokens}")
        if math.ceil(len(fed) / temporal) != grid[0]:
            raise VRHError(f"video {v}: the backend fed {grid[0]} temporal groups, the reproduced sampling "
                           f"{len(fed)} frames; the backend's frame sampling is not the one reproduced")
        out.append(layout)
    return out
