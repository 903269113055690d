"""Qwen2.5-Omni's audio layout (vrh_lmms.model.capture.audio) against the real processor and the real audio encoder.

- Counts at real checkpoint geometry: Qwen2.5-Omni-7B's preprocessor_config.json audio part (WhisperFeatureExtractor
  feature_size 128, sampling_rate 16000, hop_length 160, n_fft 400, chunk_length 300 -> n_samples 4800000,
  nb_max_frames 30000, dither 0.0) with the tiny tokenizer: the `<|AUDIO|>` run the processor writes, its
  feature_attention_mask and the audio encoder's output length equal the layout's, for clips shorter and longer than
  the encoder's 2 s chunk (n_window 100) and at the hop's edges.
- Time: token k stands for [0.04 k, 0.04 (k + 1)) s; a seconds span picks the overlapping tokens.
- Perturbation on the tiny model with the audio tower's attention zeroed: changing the waveform only in [s0, s1)
  changes exactly the tokens whose receptive window (`receptive_samples`) meets it, across a chunk boundary too.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vrh_lmms.base.errors import VRHError
from vrh_lmms.model.capture.audio import (
    AudioSettings,
    audio_positions,
    audio_runs,
    audio_token_count,
    mel_frames,
    receptive_samples,
    token_spans,
    tokens_in_seconds,
)
from vrh_lmms.model.tiny.qwen2_5_omni import REAL_FEATURE_EXTRACTOR, make_processor, make_tokenizer

# float-exact outcomes: CI runs these once more under ATEN_CPU_CAPABILITY=default (docs/contracts.md)
pytestmark = pytest.mark.exact

torch.set_num_threads(1)
SR = 16000
# clip lengths in samples: one hop and its edges, under one chunk, just past it, several chunks, odd tails
LENGTHS = [160, 320, 321, 640, 641, 16000, 31999, 32000, 32001, 32160, 48000 + 37, 16000 * 7 + 123,
           4_800_000 + 16000]  # the last: past chunk_length (300 s), truncated to nb_max_frames
REAL = AudioSettings()  # Qwen2.5-Omni-7B: 16 kHz, hop 160, n_fft 400, 30000 frames, n_window 100


def wave(n: int, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(n) * 0.1).astype(np.float32)


@pytest.fixture(scope="module")
def real_processor():
    return make_processor(make_tokenizer())  # the real checkpoint's feature extractor settings


def test_real_settings_are_read_from_the_processor(real_processor):
    fe = real_processor.feature_extractor
    assert (fe.feature_size, fe.sampling_rate, fe.hop_length, fe.n_fft, fe.n_samples, fe.nb_max_frames) == (
        128, 16000, 160, 400, 4800000, 30000)
    assert REAL_FEATURE_EXTRACTOR["chunk_length"] == 300 and fe.dither == 0.0
    assert AudioSettings.from_processor(real_processor) == REAL


@pytest.mark.parametrize("n", LENGTHS)
def test_counts_equal_the_processor_at_real_geometry(real_processor, n):
    text = "<|im_start|>user\n<|audio_bos|><|AUDIO|><|audio_eos|>what is it ?<|im_end|>\n"
    batch = real_processor(text=text, audio=[wave(n)], return_tensors="pt")
    assert int(batch["feature_attention_mask"].sum()) == mel_frames(n, REAL)
    tok = real_processor.tokenizer
    runs = audio_runs(batch["input_ids"][0], real_processor.audio_token_id)
    if n <= 320:  # two mel frames or fewer: the encoder emits nothing, and the prompt has no audio token
        assert runs == [] and audio_token_count(n, REAL) == 0 == real_processor._get_num_audio_tokens(n)
        return
    (run,) = runs
    assert run.numel() == audio_token_count(n, REAL) == real_processor._get_num_audio_tokens(n)
    ids = batch["input_ids"][0]
    assert tok.convert_ids_to_tokens([int(ids[run[0] - 1]), int(ids[run[-1] + 1])]) == ["<|audio_bos|>",
                                                                                        "<|audio_eos|>"]
    spans = token_spans(n, REAL)
    assert spans.shape == (run.numel(), 2)
    torch.testing.assert_close(spans[:, 0], torch.arange(run.numel(), dtype=torch.float64) * 0.04)
    assert spans[-1, 1] <= n / SR


def test_the_encoder_emits_as_many_features_as_the_layout(tiny_checkpoints):
    from transformers import AutoProcessor, Qwen2_5OmniForConditionalGeneration

    ckpt = tiny_checkpoints("qwen2_5_omni")
    model = Qwen2_5OmniForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float32).eval()
    processor = AutoProcessor.from_pretrained(ckpt)
    settings = AudioSettings.from_processor(processor, model.config)
    assert settings == REAL
    clips = [wave(n, i) for i, n in enumerate([641, 32001, 48037])]
    fe = processor.feature_extractor(clips, sampling_rate=SR, padding="max_length", return_attention_mask=True,
                                     return_tensors="pt")
    with torch.no_grad():
        out = model.thinker.model.get_audio_features(fe["input_features"], fe["attention_mask"])
    feats = out.pooler_output if hasattr(out, "pooler_output") else out
    total = feats.shape[0] if feats.dim() == 2 else sum(f.shape[0] for f in feats)
    assert total == sum(audio_token_count(c.size, settings) for c in clips)


def test_seconds_pick_the_overlapping_tokens():
    n = 3 * SR
    assert tokens_in_seconds(n, (0.0, 0.04), REAL).tolist() == [0]
    assert tokens_in_seconds(n, (0.05, 0.12), REAL).tolist() == [1, 2]
    assert tokens_in_seconds(n, (1.0, 1.2), REAL).tolist() == list(range(25, 30))
    assert tokens_in_seconds(n, (2.9, 9.0), REAL).tolist() == list(range(72, 75))
    ids = torch.tensor([5, 9, 7, 7, 7, 8, 1, 9] + [7] * audio_token_count(n, REAL) + [8])
    assert audio_positions(ids, 7, 1, n, (0.05, 0.12), REAL).tolist() == [8 + 1, 8 + 2]
    with pytest.raises(VRHError, match="the prompt has 2 audio clip"):
        audio_positions(ids, 7, 2, n, (0.0, 1.0), REAL)
    with pytest.raises(VRHError, match="3 audio tokens, the layout expects 74"):
        audio_positions(ids, 7, 0, n - 800, (0.0, 1.0), REAL)
    with pytest.raises(VRHError, match="start after the clip ends"):
        tokens_in_seconds(n, (3.5, 4.0), REAL)
    long = 4_800_000 + 16000  # 301 s: the feature extractor keeps 300 s
    assert tokens_in_seconds(long, (299.9, 301.0), REAL).tolist() == [7497, 7498, 7499]
    with pytest.raises(VRHError, match=r"start after the clip ends \(300.000 s\)"):
        tokens_in_seconds(long, (300.2, 300.5), REAL)


def _attention_off(model) -> None:
    with torch.no_grad():
        for layer in model.thinker.model.audio_tower.layers:
            layer.self_attn.out_proj.weight.zero_()
            layer.self_attn.out_proj.bias.zero_()


@pytest.fixture(scope="module")
def encoder(tiny_checkpoints):
    from transformers import AutoProcessor, Qwen2_5OmniForConditionalGeneration

    ckpt = tiny_checkpoints("qwen2_5_omni")
    model = Qwen2_5OmniForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float32).eval()
    _attention_off(model)
    processor = AutoProcessor.from_pretrained(ckpt)

    def features(x: np.ndarray) -> torch.Tensor:
        fe = processor.feature_extractor([x], sampling_rate=SR, padding="max_length", return_attention_mask=True,
                                         return_tensors="pt")
        with torch.no_grad():
            out = model.thinker.model.get_audio_features(fe["input_features"], fe["attention_mask"])
        feats = out.pooler_output if hasattr(out, "pooler_output") else out
        return feats if isinstance(feats, torch.Tensor) else torch.cat(list(feats))

    return features


# (s0, s1) sample spans changed: inside one token, across tokens, across the 2 s chunk boundary, at the clip's end
SPANS = [(8000, 8100), (12345, 14000), (31900, 32300), (47000, 48037)]


@pytest.mark.parametrize("span", SPANS)
def test_perturbation_changes_exactly_the_predicted_tokens(encoder, span):
    n = 48037
    base = wave(n, 1)
    base[1600:4800] += 0.9 * np.sin(2 * np.pi * 440 * np.arange(3200) / SR).astype(np.float32)  # the loudest frames
    changed = base.copy()
    s0, s1 = span
    changed[s0:s1] += (np.random.default_rng(7).standard_normal(s1 - s0) * 0.05).astype(np.float32)
    a, b = encoder(base), encoder(changed)
    assert a.shape[0] == audio_token_count(n, REAL)
    got = [k for k in range(a.shape[0]) if not torch.equal(a[k], b[k])]
    expected = [k for k in range(a.shape[0]) if receptive_samples(k, n, REAL)[0] < s1
                and receptive_samples(k, n, REAL)[1] > s0]
    assert got == expected and got
    # the tokens that *stand for* the span are among them (the receptive window only widens it)
    inside = tokens_in_seconds(n, (s0 / SR, s1 / SR), REAL).tolist()
    assert set(inside) <= set(got)


# The step added to one sample at a window's edge. Outside the window the sample meets the periodic Hann window's
# first value, exactly 0 (0.5 - 0.5 cos 0), so the token stays bit-identical whatever the step and the CPU kernels.
# Just inside it meets the second (or last) value, sin^2(pi / 400) = 6.2e-5: a step of 0.05 moved the frame's
# spectrum by ~3e-6, about 2.5e-6 of a noise bin (|X| ~ 1.2), which float32 FFT and mel rounding swallowed under
# ATEN_CPU_CAPABILITY=default (token 49 here, token 37 on another x86 machine's best kernels). A step of 1.0 moves
# it by ~5e-5 of a bin, ~800 float32 epsilons (checked under default, AVX2 and AVX512). It stays far below the sine
# that sets the log-mel clamp (a 1.0 spike gives |X|^2 <= 1 per bin, the 440 Hz tone ~8e3), so the clamp level,
# which every token shares, does not move.
EDGE_STEP = 1.0


@pytest.mark.parametrize("token", [0, 37, 49, 50, 1200])
def test_receptive_window_is_exact_to_the_sample(encoder, token):
    """One sample changed just inside / just outside token k's window: k changes exactly when it is inside
    (token 50 starts the second 2 s chunk, 49 ends the first; 1200 is the last token of the clip)."""
    n = 48037
    base = wave(n, 2)
    base[1600:4800] += 0.9 * np.sin(2 * np.pi * 440 * np.arange(3200) / SR).astype(np.float32)
    a = encoder(base)
    token = min(token, a.shape[0] - 1)
    lo, hi = receptive_samples(token, n, REAL)
    for s, inside in ((lo - 1, False), (lo, True), (hi - 1, True), (hi, False)):
        if not 0 <= s < n:
            continue
        x = base.copy()
        x[s] += EDGE_STEP
        assert (not torch.equal(encoder(x)[token], a[token])) == inside, (token, s, inside)
