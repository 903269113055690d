"""A video with its audio track through lmms-eval's qwen2_5_omni backend (`vrh_qwen25_omni`, tiny omni model): an mp4
written here (moviepy, ffmpeg from imageio-ffmpeg), read by the backend (audio track detected, qwen_omni_utils reads
frames and audio), answered; audio evidence seconds land on the audio tokens of the interleaved block, and the
captured attention on them equals eager attention on the inputs the backend built."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from support.wrappers import model_inputs, recorded_generate

from vrh_lmms.model.capture.attention import CapturePlan, capture_attention
from vrh_lmms.model.capture.audio import AudioSettings, audio_token_count, tokens_in_seconds
from vrh_lmms.model.capture.audio_video import interleaved_offsets
from vrh_lmms.runs.discovery.audio_evidence import audio_keys, audio_target
from vrh_lmms.runs.discovery.evidence import KeyContext

torch.set_num_threads(1)
SR, SECONDS, FPS = 16000, 3.0, 4


@pytest.fixture(scope="module")
def video_path(tmp_path_factory):
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
    from moviepy import AudioArrayClip, ImageSequenceClip

    folder = tmp_path_factory.mktemp("av")
    (folder / "bin").mkdir()
    (folder / "bin" / "ffmpeg").symlink_to(imageio_ffmpeg.get_ffmpeg_exe())  # audioread calls `ffmpeg`
    mp = pytest.MonkeyPatch()
    mp.setenv("PATH", f"{folder / 'bin'}{os.pathsep}{os.environ['PATH']}")
    frames = [np.full((56, 84, 3), 20 * i, np.uint8) for i in range(int(SECONDS * FPS))]
    t = np.arange(int(SECONDS * SR)) / SR
    wav = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    clip = ImageSequenceClip(frames, fps=FPS).with_audio(AudioArrayClip(np.stack([wav, wav], 1), fps=SR))
    path = folder / "clip.mp4"
    clip.write_videofile(str(path), fps=FPS, codec="libx264", audio_codec="aac", logger=None)
    yield path
    mp.undo()


@pytest.fixture(scope="module")
def answered(tiny_checkpoints, video_path):
    from lmms_eval.api.instance import Instance

    from vrh_lmms.model_wrappers.qwen2_5_omni import VRHQwen25Omni

    lm = VRHQwen25Omni(pretrained=str(tiny_checkpoints("qwen2_5_omni")), dtype="float32")
    doc = {"video": str(video_path), "q": "what is it"}
    lm.task_dict = {"t": {"s": {0: doc}}}
    gen = {"max_new_tokens": 3, "temperature": 0, "until": ["<|never|>"]}
    request = Instance(request_type="generate_until", arguments=(doc["q"], gen, lambda d: [d["video"]], 0, "t", "s"),
                       idx=0, metadata={"task": "t", "doc_id": 0, "repeats": 1})
    with recorded_generate(lm.model) as calls:
        (out,) = lm.generate_until([request])
    return lm, out, calls[0]


def test_the_backend_answers_a_video_with_its_audio(answered, video_path):
    lm, out, call = answered
    assert Path(video_path).stat().st_size > 0 and out.strip()
    assert call["use_audio_in_video"] is True
    inputs = model_inputs(call)
    assert "feature_attention_mask" in inputs and "video_grid_thw" in inputs


def test_audio_seconds_land_in_the_interleaved_block_and_capture_equals_eager(answered):
    lm, _, call = answered
    inputs = model_inputs(call)
    ids = inputs["input_ids"][0]
    proc = lm.processor
    settings = AudioSettings.from_processor(proc, lm.model.config)
    samples = int(inputs["feature_attention_mask"].sum()) * settings.hop_length
    target = audio_target({"vrh_evidence": {"kind": "audio", "seconds": [1.0, 1.5]}})
    keys = audio_keys(target, KeyContext("qwen2_5_omni", proc, lm.tokenizer, lm, inputs, ids, ids.numel()))
    # independently: the block after <|audio_bos|>, the layout's audio offsets of tokens 25..37
    bos = int(torch.nonzero(ids == lm.tokenizer.convert_tokens_to_ids("<|audio_bos|>"))[0])
    layout = interleaved_offsets(inputs["video_grid_thw"][0].tolist(), float(inputs["video_second_per_grid"][0]),
                                 audio_token_count(samples, settings))
    picked = tokens_in_seconds(samples, (1.0, 1.5), settings)
    assert picked.tolist() == list(range(25, 38))
    expected = (bos + 1 + layout.audio[picked]).tolist()
    assert torch.nonzero(keys.evidence).flatten().tolist() == expected
    assert (ids[expected] == proc.audio_token_id).all()
    assert ids[bos + 1] == proc.video_token_id  # the block opens with the first video chunk
    assert int(keys.media.sum()) == int((ids == proc.audio_token_id).sum())
    # captured mass of the last prompt row on those keys = eager attention
    row = ids.numel() - 1
    plan = CapturePlan(query_positions=torch.tensor([[row]]), key_sets={"a": keys.evidence.view(1, -1)})
    model = lm.model
    with torch.no_grad(), capture_attention(model, plan) as handle:
        model(**inputs, use_audio_in_video=True)
    got = handle.result().mass["a"][0][:, :, 0].double()
    model.thinker.set_attn_implementation({"text_config": "eager"})
    try:
        with torch.no_grad():
            out = model.thinker(**inputs, use_audio_in_video=True, output_attentions=True)
    finally:
        model.thinker.set_attn_implementation({"text_config": "sdpa"})
    eager = torch.stack(out.attentions, dim=1)[0].double()[:, :, row][..., expected].sum(-1)
    torch.testing.assert_close(got, eager, atol=2e-5, rtol=0)


def test_a_forward_without_the_flag_reads_it_from_the_ids(answered):
    """Discovery's teacher-forced forward passes tensors only: the model still runs TMRoPE's interleaved positions."""
    lm, _, call = answered
    inputs = model_inputs(call)
    with torch.no_grad():
        got = lm.model(**inputs).logits
        interleaved = lm.model.thinker(**inputs, use_audio_in_video=True).logits
        plain = lm.model.thinker(**inputs, use_audio_in_video=False).logits
    assert torch.equal(got, interleaved) and not torch.allclose(got, plain)
