"""Qwen2.5-Omni video with its audio track (use_audio_in_video): the interleaved layout of
vrh_lmms.model.capture.audio_video against the real processor (real audio settings and Qwen2.5-Omni's video defaults,
the tiny tokenizer), for videos and audio tracks of several lengths (audio longer, shorter, equal), 2 s chunks; and
the thinker consumes that block (its TMRoPE position ids are built from it)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vrh_lmms.model.capture.audio import AudioSettings, audio_token_count, tokens_in_seconds
from vrh_lmms.model.capture.audio_video import chunk_bounds, interleaved_offsets, video_tokens_in_seconds

# float-exact outcomes: CI runs these once more under ATEN_CPU_CAPABILITY=default (docs/contracts.md)
pytestmark = pytest.mark.exact

torch.set_num_threads(1)
SR = 16000


@pytest.fixture(scope="module")
def processor(tiny_checkpoints):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(tiny_checkpoints("qwen2_5_omni"))


def encode(processor, frames: int, audio_samples: int, size=(56, 84)):
    video = np.random.default_rng(frames).integers(0, 255, (frames, *size, 3)).astype(np.uint8)
    wav = (np.random.default_rng(audio_samples).standard_normal(audio_samples) * 0.1).astype(np.float32)
    msgs = [{"role": "user", "content": [{"type": "video", "video": "v"}, {"type": "text", "text": "what is it"}]}]
    text = processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    return processor(text=text, videos=[video], audio=[wav], audio_from_video_indices=[0], return_tensors="pt",
                     load_audio_from_video=True, videos_kwargs={"fps": 2.0, "do_sample_frames": False})


def test_chunk_bounds_cut_at_each_multiple():
    assert chunk_bounds([0, 25, 50, 75, 100], 50) == [(0, 2), (2, 4), (4, 5)]
    assert chunk_bounds(list(range(120)), 50) == [(0, 50), (50, 100), (100, 120)]
    assert chunk_bounds([0, 150, 160], 50) == [(0, 1), (1, 2), (2, 3)]  # one multiple per cut, as upstream
    from transformers import Qwen2_5OmniProcessor

    for values in ([0, 150, 160], [0.0, 37.5, 75.0, 112.5, 150.0], list(range(0, 400, 7))):
        assert chunk_bounds(values, 50) == Qwen2_5OmniProcessor.get_chunked_index(None, np.array(values), 50)


# (frames at 2 fps, audio samples): audio as long as the video, longer, shorter, odd lengths
CASES = [(12, 6 * SR + 77), (8, 6 * SR), (12, 2 * SR + 500), (4, SR * 3 // 2), (10, 5 * SR - 1)]


@pytest.mark.parametrize("frames,samples", CASES)
def test_interleaving_equals_the_processor(processor, frames, samples):
    batch = encode(processor, frames, samples)
    ids = batch["input_ids"][0]
    tok = processor.tokenizer
    bos = int(torch.nonzero(ids == tok.convert_tokens_to_ids("<|audio_bos|>"))[0])
    eos = int(torch.nonzero(ids == tok.convert_tokens_to_ids("<|audio_eos|>"))[0])
    block = ids[bos + 1:eos]
    grid = batch["video_grid_thw"][0].tolist()
    spg = float(batch["video_second_per_grid"][0])
    settings = AudioSettings.from_processor(processor)
    n_audio = audio_token_count(samples, settings)
    layout = interleaved_offsets(grid, spg, n_audio, processor.video_processor.merge_size)
    assert layout.length == block.numel()
    assert (block[layout.video] == processor.video_token_id).all()
    assert (block[layout.audio] == processor.audio_token_id).all()
    assert layout.video.numel() + layout.audio.numel() == block.numel()
    assert torch.equal(torch.sort(torch.cat([layout.video, layout.audio])).values, torch.arange(block.numel()))
    # a 1 s span picks its audio tokens and the video grids that overlap it
    audio = tokens_in_seconds(samples, (1.0, 2.0), settings)
    assert audio.tolist() == list(range(25, min(50, n_audio)))
    video = video_tokens_in_seconds(layout, spg, (1.0, 2.0))
    assert set((video // layout.tokens_per_grid).tolist()) == {g for g in range(grid[0]) if g * spg < 2.0
                                                               and (g + 1) * spg > 1.0}


def test_the_thinker_runs_on_the_interleaved_block(tiny_checkpoints, processor):
    from transformers import Qwen2_5OmniForConditionalGeneration

    model = Qwen2_5OmniForConditionalGeneration.from_pretrained(tiny_checkpoints("qwen2_5_omni"),
                                                                dtype=torch.float32).eval()
    batch = encode(processor, 8, 4 * SR)
    with torch.no_grad():
        out = model.thinker(**batch, use_audio_in_video=True)
    assert out.logits.shape[1] == batch["input_ids"].shape[1]


def test_clip_positions_in_a_prompt_mixing_clips_and_videos():
    """A standalone clip, a video without audio, then a video with its track: clip 1 is the second video's track."""
    from vrh_lmms.base.errors import VRHError
    from vrh_lmms.model.capture.audio_video import audio_clip_positions

    tokens = {"audio": 1, "video": 2, "audio_bos": 3, "audio_eos": 4, "vision_bos": 5}
    grids, spg = torch.tensor([[1, 4, 4], [2, 4, 4]]), torch.tensor([1.0, 1.0])
    layout = interleaved_offsets((2, 4, 4), 1.0, 3)
    block = torch.zeros(layout.length, dtype=torch.long)
    block[layout.video], block[layout.audio] = 2, 1
    ids = torch.tensor([9, 3, 1, 1, 1, 4, 9, 5, 2, 2, 2, 2, 6, 9, 5, 3, *block.tolist(), 4, 6, 9])
    assert audio_clip_positions(ids, tokens, torch.tensor([1, 2]), 0, 3, grids, spg).tolist() == [3, 4]
    got = audio_clip_positions(ids, tokens, torch.tensor([0, 2]), 1, 3, grids, spg)
    assert got.tolist() == (16 + layout.audio[[0, 2]]).tolist() and (ids[got] == 1).all()
    with pytest.raises(VRHError, match="the prompt has 3 audio tokens, the layout expects 4"):
        audio_clip_positions(ids, tokens, torch.tensor([0]), 0, 4, grids, spg)
    with pytest.raises(VRHError, match="audio index 2: the prompt has 2 audio clip"):
        audio_clip_positions(ids, tokens, torch.tensor([0]), 2, 3, grids, spg)
