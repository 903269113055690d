"""Audio-token layout of Qwen2.5-Omni: which stretch of the source audio each `<|AUDIO|>` placeholder stands for.

The chain, as transformers computes it (WhisperFeatureExtractor, then `Qwen2_5OmniAudioEncoder`):
- the feature extractor cuts the waveform into mel frames every `hop_length` samples (10 ms at 16 kHz, hop 160):
  a clip of n samples has ceil(n / hop) valid frames (its `feature_attention_mask`), at most `nb_max_frames`;
- the encoder splits those frames into chunks of 2 * n_window (200 frames, 2 s), halves them with conv2 (stride 2)
  and halves them again by average-pooling pairs: L frames give ((L - 1) // 2 + 1 - 2) // 2 + 1 tokens
  (`_get_feat_extract_output_lengths`). Chunks hold an even number of conv outputs, so no pair straddles two;
- so token k stands for mel frames [4k, 4k + 4), that is seconds [4k * hop / sr, (4k + 4) * hop / sr) = 40 ms
  each, the last one cut at the clip's end.
What token k can *see* is wider: conv1 (kernel 3) and conv2 (kernel 3, stride 2) reach mel frames [4k - 2, 4k + 5)
(clipped to its chunk), each frame reads n_fft samples around its centre, and the encoder's attention mixes a whole
chunk. `receptive_samples` gives that window for an encoder whose attention is off (tests check it to the sample).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from vrh_lmms.base.errors import VRHError

FRAMES_PER_TOKEN = 4  # conv2 stride 2, then average pooling of pairs


@dataclass(frozen=True)
class AudioSettings:
    """What the layout needs: the feature extractor's framing and the audio encoder's chunk size."""

    sampling_rate: int = 16000
    hop_length: int = 160
    n_fft: int = 400
    nb_max_frames: int = 30000
    n_window: int = 100

    @classmethod
    def from_processor(cls, processor: Any, config: Any = None) -> AudioSettings:
        """Settings of a Qwen2.5-Omni processor (its WhisperFeatureExtractor) and, when given, the model's config
        (`thinker_config.audio_config.n_window`)."""
        fe = getattr(processor, "feature_extractor", None)
        if fe is None:
            raise VRHError(f"{type(processor).__name__} has no feature_extractor: no audio layout")
        n_window = cls.n_window
        audio_cfg = getattr(getattr(config, "thinker_config", config), "audio_config", None)
        if audio_cfg is not None:
            n_window = int(audio_cfg.n_window)
        return cls(int(fe.sampling_rate), int(fe.hop_length), int(fe.n_fft), int(fe.nb_max_frames), n_window)

    @property
    def token_seconds(self) -> float:
        """Source seconds one audio token stands for (0.04 at 16 kHz, hop 160)."""
        return FRAMES_PER_TOKEN * self.hop_length / self.sampling_rate


def mel_frames(n_samples: int, settings: AudioSettings) -> int:
    """Valid mel frames of a clip of `n_samples` (the ones its feature_attention_mask marks)."""
    return min(math.ceil(n_samples / settings.hop_length), settings.nb_max_frames)


def encoder_tokens(frames: int) -> int:
    """Audio tokens the encoder emits for `frames` mel frames (transformers' _get_feat_extract_output_lengths)."""
    after_conv = (frames - 1) // 2 + 1
    return (after_conv - 2) // 2 + 1


def kept_seconds(n_samples: int, settings: AudioSettings) -> float:
    """Seconds of the clip the model sees: the feature extractor truncates at nb_max_frames (300 s for
    Qwen2.5-Omni; lmms-eval's backend cuts longer audio into 5 min clips first)."""
    return min(n_samples, settings.nb_max_frames * settings.hop_length) / settings.sampling_rate


def audio_token_count(n_samples: int, settings: AudioSettings) -> int:
    return encoder_tokens(mel_frames(n_samples, settings))


def token_spans(n_samples: int, settings: AudioSettings) -> torch.Tensor:
    """(tokens, 2) float64: the [start, end) seconds of the source audio each audio token stands for."""
    n = audio_token_count(n_samples, settings)
    step = settings.token_seconds
    starts = torch.arange(n, dtype=torch.float64) * step
    ends = torch.clamp(starts + step, max=kept_seconds(n_samples, settings))
    return torch.stack([starts, ends], dim=1)


def tokens_in_seconds(n_samples: int, seconds: tuple[float, float], settings: AudioSettings) -> torch.Tensor:
    """Indices (within the clip's audio tokens) of the tokens whose span overlaps [t0, t1)."""
    t0, t1 = (float(v) for v in seconds)
    duration = kept_seconds(n_samples, settings)
    if not 0 <= t0 < t1:
        raise VRHError(f"audio seconds {[t0, t1]}: need 0 <= t0 < t1")
    if t0 >= duration:
        raise VRHError(f"audio seconds {[t0, t1]} start after the clip ends ({duration:.3f} s)")
    spans = token_spans(n_samples, settings)
    return torch.nonzero((spans[:, 0] < t1) & (spans[:, 1] > t0)).flatten()


def receptive_samples(token: int, n_samples: int, settings: AudioSettings) -> tuple[int, int]:
    """[first, last) waveform samples that can change token `token` when the encoder's attention is off: conv1 and
    conv2 reach frames [4k - 2, 4k + 5) within the token's 2 * n_window chunk (and the valid frames); frame f weighs
    samples (f * hop - n_fft / 2, f * hop + n_fft / 2): a centred STFT whose periodic Hann window is exactly 0 at its
    first sample (at the clip's start the reflected padding reads [0, n_fft / 2) for frame 0)."""
    frames = mel_frames(n_samples, settings)
    chunk = 2 * settings.n_window
    lo_chunk = (FRAMES_PER_TOKEN * token // chunk) * chunk
    first = max(FRAMES_PER_TOKEN * token - 2, lo_chunk)
    last = min(FRAMES_PER_TOKEN * token + 5, lo_chunk + chunk, frames)  # exclusive
    half = settings.n_fft // 2
    return max(first * settings.hop_length - half + 1, 0), min((last - 1) * settings.hop_length + half, n_samples)


def audio_runs(input_ids: torch.Tensor, audio_token_id: int) -> list[torch.Tensor]:
    """Positions of each audio's placeholder tokens, in prompt order: maximal runs of `audio_token_id` (a plain
    audio's run sits between <|audio_bos|> and <|audio_eos|>)."""
    ids = input_ids.flatten().tolist()
    runs, current = [], []
    for pos, tid in enumerate(ids):
        if tid == audio_token_id:
            current.append(pos)
        elif current:
            runs.append(torch.tensor(current))
            current = []
    if current:
        runs.append(torch.tensor(current))
    return runs


def clip_samples(feature_attention_mask: torch.Tensor, settings: AudioSettings) -> list[int]:
    """Upper bounds of each clip's sample count from its valid mel frames (frames * hop): what the processor's
    output keeps of the clip's length, to the hop."""
    return [int(v) * settings.hop_length for v in feature_attention_mask.sum(-1).tolist()]


def audio_positions(input_ids: torch.Tensor, audio_token_id: int, index: int, n_samples: int,
                    seconds: tuple[float, float], settings: AudioSettings) -> torch.Tensor:
    """Prompt positions of the audio tokens of audio `index` that stand for `seconds` of its source."""
    runs = audio_runs(input_ids, audio_token_id)
    if not 0 <= index < len(runs):
        raise VRHError(f"audio index {index}: the prompt has {len(runs)} audio clip(s)")
    run = runs[index]
    expected = audio_token_count(n_samples, settings)
    if run.numel() != expected:
        raise VRHError(f"audio {index}: the prompt has {run.numel()} audio tokens, the layout expects {expected} "
                       f"for {n_samples} samples")
    return run[tokens_in_seconds(n_samples, seconds, settings)]
