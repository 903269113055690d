"""Layout of a Qwen2.5-Omni video whose audio track rides along (`use_audio_in_video` / `load_audio_from_video`).

The processor writes one block `<|audio_bos|> ... <|audio_eos|>` (inside `<|vision_bos|> ... <|vision_eos|>`) in
which video and audio tokens alternate by time (TMRoPE's interleaving): every video token of temporal grid t gets
the time index t * second_per_grid * position_id_per_seconds (25 per second), audio token k the index k (one per
40 ms, vrh_lmms.model.capture.audio); both sequences are cut where their index reaches the next multiple of
position_id_per_seconds * seconds_per_chunk (50: 2 s), and the block is video chunk 0, audio chunk 0, video chunk
1, audio chunk 1, ... (the chunk cut advances one multiple per cut, as transformers' `get_chunked_index` does).
`interleaved_offsets` gives, for each video token and each audio token, its offset after `<|audio_bos|>`; with the
audio layout's seconds and the video grid's seconds (grid t = [t, t + 1) * second_per_grid) a span of time maps to
key positions of either modality.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vrh_lmms.base.errors import VRHError


def chunk_bounds(values: list[float], per_chunk: int) -> list[tuple[int, int]]:
    """[start, end) index ranges of `values` (non-decreasing time indices) cut where a value reaches the next
    multiple of `per_chunk`; the multiple advances by one per cut."""
    out, start, current = [], 0, 1
    for i, value in enumerate(values):
        if value >= current * per_chunk:
            out.append((start, i))
            start, current = i, current + 1
    out.append((start, len(values)))
    return out


@dataclass(frozen=True)
class InterleavedLayout:
    """Offsets after `<|audio_bos|>`: video[j] for video token j (grid-major, then rows, then columns), audio[k]
    for audio token k; `length` = tokens between `<|audio_bos|>` and `<|audio_eos|>`."""

    video: torch.Tensor
    audio: torch.Tensor
    tokens_per_grid: int
    length: int


def interleaved_offsets(grid_thw: tuple[int, int, int], second_per_grid: float, n_audio: int, merge_size: int = 2,
                        position_id_per_seconds: float = 25, seconds_per_chunk: float = 2.0) -> InterleavedLayout:
    t, h, w = (int(v) for v in grid_thw)
    per_grid = (h // merge_size) * (w // merge_size)
    video_index = [g * second_per_grid * position_id_per_seconds for g in range(t) for _ in range(per_grid)]
    per_chunk = int(position_id_per_seconds * seconds_per_chunk)
    v_chunks = chunk_bounds(video_index, per_chunk)
    a_chunks = chunk_bounds(list(range(n_audio)), per_chunk)
    video, audio = torch.empty(len(video_index), dtype=torch.long), torch.empty(n_audio, dtype=torch.long)
    offset = 0
    for j in range(max(len(v_chunks), len(a_chunks))):
        for chunks, out in ((v_chunks, video), (a_chunks, audio)):
            if j < len(chunks):
                a, b = chunks[j]
                out[a:b] = torch.arange(offset, offset + b - a)
                offset += b - a
    return InterleavedLayout(video, audio, per_grid, offset)


def video_tokens_in_seconds(layout: InterleavedLayout, second_per_grid: float,
                            seconds: tuple[float, float]) -> torch.Tensor:
    """Video token indices whose temporal grid [t, t + 1) * second_per_grid overlaps [t0, t1)."""
    t0, t1 = (float(v) for v in seconds)
    grid = torch.arange(layout.video.numel()) // layout.tokens_per_grid
    start = grid.double() * second_per_grid
    return torch.nonzero((start < t1) & (start + second_per_grid > t0)).flatten()


def _is_video_block(ids: list[int], start: int, video_id: int, audio_bos_id: int) -> bool:
    """Whether the `<|vision_bos|>` at `start` opens a video (plain run of video tokens, or an audio block with
    video tokens inside)."""
    nxt = ids[start + 1] if start + 1 < len(ids) else None
    return nxt == video_id or (nxt == audio_bos_id and start + 2 < len(ids) and ids[start + 2] == video_id)


def audio_clip_positions(input_ids: torch.Tensor, tokens: dict[str, int], clip_tokens: torch.Tensor,
                         index: int, n_tokens: int, video_grids: torch.Tensor | None = None,
                         seconds_per_grid: torch.Tensor | None = None, merge_size: int = 2,
                         position_id_per_seconds: float = 25, seconds_per_chunk: float = 2.0) -> torch.Tensor:
    """Prompt positions of audio clip `index`'s tokens `clip_tokens` (indices within the clip, vrh_lmms.model.capture
    .audio). Clips are the prompt's `<|audio_bos|>` blocks in order (the processor's audio order: standalone clips
    and videos' audio tracks as their content comes); a block holding video tokens is a video's track, interleaved
    (`interleaved_offsets`, with that video's grid). `tokens`: ids of audio, video, audio_bos, audio_eos, vision_bos.
    `n_tokens`: the clip's token count by the audio layout, which the block must hold.
    """
    ids = input_ids.flatten().tolist()
    bos = [i for i, t in enumerate(ids) if t == tokens["audio_bos"]]
    eos = [i for i, t in enumerate(ids) if t == tokens["audio_eos"]]
    if len(bos) != len(eos):
        raise VRHError(f"the prompt has {len(bos)} <|audio_bos|> and {len(eos)} <|audio_eos|>")
    if not 0 <= index < len(bos):
        raise VRHError(f"audio index {index}: the prompt has {len(bos)} audio clip(s)")
    start, end = bos[index], eos[index]
    block = ids[start + 1:end]
    if tokens["video"] not in block:  # a standalone clip: one run of audio tokens
        if any(t != tokens["audio"] for t in block):
            raise VRHError(f"audio clip {index}: its block holds other tokens than audio tokens")
        if len(block) != n_tokens:
            raise VRHError(f"audio clip {index}: the prompt has {len(block)} audio tokens, the layout expects "
                           f"{n_tokens}")
        return start + 1 + clip_tokens
    if video_grids is None or seconds_per_grid is None:
        raise VRHError("an audio track inside a video needs video_grid_thw and video_second_per_grid")
    video = sum(1 for i, t in enumerate(ids[:start - 1]) if t == tokens["vision_bos"]  # videos before its own
                and _is_video_block(ids, i, tokens["video"], tokens["audio_bos"]))
    n_audio = sum(1 for t in block if t == tokens["audio"])
    if n_audio != n_tokens:
        raise VRHError(f"audio clip {index} (the track of video {video}): the prompt has {n_audio} audio tokens, "
                       f"the layout expects {n_tokens}")
    layout = interleaved_offsets(tuple(video_grids[video].tolist()), float(seconds_per_grid[video]), n_audio,
                                 merge_size, position_id_per_seconds, seconds_per_chunk)
    if layout.length != len(block) or any(block[o] != tokens["audio"] for o in layout.audio.tolist()):
        raise VRHError(f"audio clip {index}: the interleaved block does not follow the layout of video {video}")
    return start + 1 + layout.audio[clip_tokens]
