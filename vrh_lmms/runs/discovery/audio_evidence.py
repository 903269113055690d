"""Audio-span evidence: the audio tokens that stand for [t0, t1] seconds of a doc's source audio.

`vrh_evidence = {"kind": "audio", "seconds": [t0, t1]}` (optionally `"index": a`, the a-th audio clip of the prompt,
0-based; `"samples": n`, the clip's length in samples at the feature extractor's rate, which pins the last token's
end exactly; `"query"`: the question's words, the `in` query rows). Positions come from the exact inputs the backend
built: each clip's `<|audio_bos|>` block in `input_ids`, its valid mel frames in `feature_attention_mask`, and the
layout of vrh_lmms.model.capture.audio; a video's audio track (use_audio_in_video) is a clip too, in content order,
placed in its interleaved block through vrh_lmms.model.capture.audio_video. The media key set is every audio token.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model.capture.audio import AudioSettings, audio_token_count, clip_samples, tokens_in_seconds
from vrh_lmms.model.capture.audio_video import audio_clip_positions
from vrh_lmms.runs.discovery.evidence import EvidenceKeys, EvidenceKind, media_mask, register_evidence
from vrh_lmms.runs.discovery.targets import doc_image_id

KIND_AUDIO = "audio"


@dataclass(frozen=True)
class AudioTarget:
    seconds: tuple[float, float]
    index: int
    samples: int | None
    expression: str
    image_id: str
    image_size: None = None  # no single image's layout extras


def audio_target(doc: Mapping[str, Any], where: str = "doc") -> AudioTarget:
    ev = doc["vrh_evidence"]
    seconds = ev.get("seconds")
    if (not isinstance(seconds, (list, tuple)) or len(seconds) != 2
            or not all(isinstance(v, (int, float)) for v in seconds) or not 0 <= seconds[0] < seconds[1]):
        raise VRHError(f"{where}: vrh_evidence of kind audio needs `seconds: [t0, t1]` with 0 <= t0 < t1, "
                       f"got {seconds!r}")
    index = ev.get("index", 0)
    if not isinstance(index, int) or index < 0:
        raise VRHError(f"{where}: vrh_evidence `index` must be a clip number >= 0, got {index!r}")
    samples = ev.get("samples")
    if samples is not None and (not isinstance(samples, int) or samples <= 0):
        raise VRHError(f"{where}: vrh_evidence `samples` must be a positive sample count, got {samples!r}")
    return AudioTarget((float(seconds[0]), float(seconds[1])), index, samples, str(ev.get("query") or ""),
                       doc_image_id(doc))


def audio_token_id(processor: Any) -> int:
    tid = getattr(processor, "audio_token_id", None)
    if isinstance(tid, int):
        return tid
    tok = getattr(processor, "audio_token", None) or getattr(processor.tokenizer, "audio_token", None)
    if tok is None:
        raise VRHError(f"{type(processor).__name__} names no audio token: this family takes no audio")
    return int(processor.tokenizer.convert_tokens_to_ids(tok))


def audio_keys(target: AudioTarget, ctx):
    mask_key = "feature_attention_mask"
    if ctx.tensors.get(mask_key) is None:
        raise VRHError(f"the backend's inputs carry no {mask_key}: the prompt has no audio to place "
                       f"seconds {list(target.seconds)} in")
    model = getattr(ctx.backend, "model", None)
    settings = AudioSettings.from_processor(ctx.processor, getattr(model, "config", None))
    clips = clip_samples(ctx.tensors[mask_key].detach().cpu(), settings)
    if target.index >= len(clips):
        raise VRHError(f"audio index {target.index}: the prompt has {len(clips)} audio clip(s)")
    samples = clips[target.index]
    if target.samples is not None:
        if not samples - settings.hop_length < target.samples <= samples:
            raise VRHError(f"vrh_evidence samples={target.samples} disagrees with the clip the backend fed "
                           f"({samples // settings.hop_length} mel frames)")
        samples = target.samples
    proc, tok = ctx.processor, ctx.tokenizer
    token = audio_token_id(proc)
    ids = {"audio": token, "video": int(proc.video_token_id),
           **{k: int(tok.convert_tokens_to_ids(getattr(proc, f"{k}_token"))) for k in
              ("audio_bos", "audio_eos", "vision_bos")}}
    grids, spg = ctx.tensors.get("video_grid_thw"), ctx.tensors.get("video_second_per_grid")
    positions = audio_clip_positions(
        ctx.prompt_ids, ids, tokens_in_seconds(samples, target.seconds, settings), target.index,
        audio_token_count(samples, settings), None if grids is None else grids.detach().cpu(),
        None if spg is None else spg.detach().cpu(), int(getattr(proc.video_processor, "merge_size", 2)),
        float(getattr(proc, "position_id_per_seconds", 25)), float(getattr(proc, "seconds_per_chunk", 2.0)))
    evidence = torch.zeros(ctx.seq_len, dtype=torch.bool)
    evidence[positions] = True
    return EvidenceKeys(evidence, media_mask(ctx.prompt_ids, [token], ctx.seq_len))


def _register() -> None:
    register_evidence(EvidenceKind(KIND_AUDIO, audio_target, audio_keys, grid=False,
                                   doc="a span of a source audio's time, through the audio encoder's layout"))


_register()
