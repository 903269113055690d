"""Video layout (vrh_lmms.model.capture.video) against the real pipeline: lmms-eval 0.7.3's qwen2_5_vl backends (simple
and chat) reading real mp4 files through qwen_vl_utils and the checkpoint's processor.

Geometry: Qwen2.5-VL-7B-Instruct's preprocessor_config.json (patch 14, merge 2, temporal_patch_size 2, min_pixels
3136, max_pixels 12845056) with the tiny tokenizer; the backends then pass their own pixel limits (lmms-eval's
defaults 256*28*28 / 1605632 unless given). Each source frame i is a flat grey of its own level, so every patch of
`pixel_values_videos` says which source frame it came from: the fed frames, each temporal group's two frames and
their times are read from the processor output, not from the module. Then the perturbation check on the tiny model
(vision attention zeroed, vrh_lmms.model.capture.verify): changing only source frame f changes exactly the tokens of the
temporal group that holds f, and none when the backend does not feed f.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lmms_eval.api.instance import Instance

from vrh_lmms.model.capture.verify import layer0_inputs, zeroed_vision_attention
from vrh_lmms.model.capture.video import backend_frames, backend_grid, probe, video_layouts

# float-exact outcomes: CI runs these once more under ATEN_CPU_CAPABILITY=default (docs/contracts.md)
pytestmark = pytest.mark.exact

torch.set_num_threads(1)
SEVEN_B = {"min_pixels": 3136, "max_pixels": 12845056}  # Qwen2.5-VL-7B-Instruct preprocessor_config.json
TASK, SPLIT = "vrh_test_video", "test"
# (frames, fps, width, height): odd and even counts, fewer frames than qwen_vl_utils' minimum, several aspect ratios
CLIPS = [(21, 4, 224, 160), (9, 3, 320, 240), (33, 8, 640, 360), (7, 2, 100, 300), (5, 1, 64, 48),
         (4, 2, 1280, 720)]  # the last one past qwen_vl_utils' per-frame cap (768 tokens)


def levels(n: int) -> list[int]:
    return [int(round(16 + i * 224 / max(n - 1, 1))) for i in range(n)]


def write_clip(path, n: int, fps: int, w: int, h: int, grey: list[int] | None = None) -> str:
    import av

    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=fps, options={"crf": "0"})
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        for level in grey or levels(n):
            out.mux(stream.encode(av.VideoFrame.from_ndarray(np.full((h, w, 3), level, np.uint8), format="rgb24")))
        out.mux(stream.encode())
    return str(path)


def backend(cls_name: str, ckpt, **args):
    from vrh_lmms.model_wrappers import qwen2_5_vl

    text = ",".join(f"{k}={v}" for k, v in {"pretrained": ckpt, "dtype": "float32", **args}.items())
    return getattr(qwen2_5_vl, cls_name).create_from_arg_string(text, {"batch_size": 1})


def fed_inputs(lm, *paths: str) -> dict[str, torch.Tensor]:
    """The tensors the backend hands `generate` for the videos + a question (generate stubbed: no decoding)."""
    seen = {}

    def generate(**kwargs):
        seen.update({k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)})
        return torch.cat([kwargs["input_ids"], torch.full((1, 1), lm.tokenizer.eos_token_id)], dim=1)

    gen = {"max_new_tokens": 1, "temperature": 0}
    if lm.is_simple:
        args = ("What is shown ?", gen, lambda d: list(d["videos"]), 0, TASK, SPLIT)
    else:
        def messages(d):
            return [{"role": "user", "content": [*({"type": "video", "url": v} for v in d["videos"]),
                                                 {"type": "text", "text": "What is shown ?"}]}]
        args = ("What is shown ?", messages, gen, 0, TASK, SPLIT)
    lm.task_dict = {TASK: {SPLIT: {0: {"videos": paths}}}}
    lm.model.generate = generate
    try:
        lm.generate_until([Instance(request_type="generate_until", arguments=args, idx=0,
                                    metadata={"task": TASK, "doc_id": 0, "repeats": 1})])
    finally:
        del lm.model.generate
    return seen


def patch_frames(lm, pixels: torch.Tensor, n: int) -> torch.Tensor:
    """(rows, 2): the source frame of each patch row's two temporal slices, by the grey level of channel 0."""
    vp = lm.processor.video_processor
    p, tp = vp.patch_size, vp.temporal_patch_size
    x = pixels.double().view(-1, 3, tp, p, p)[:, 0] * vp.image_std[0] + vp.image_mean[0]
    grey = x.mean((-1, -2)) * 255
    return (grey[..., None] - torch.tensor(levels(n), dtype=torch.float64)).abs().argmin(-1)


@pytest.fixture(scope="module")
def seven_b(tmp_path_factory):
    from vrh_lmms.model.tiny.qwen2_5_vl import build

    return build(tmp_path_factory.mktemp("q25_7b_geometry"), seed=0, processor_kwargs=SEVEN_B)


BACKENDS = [("VRHQwen25", {}), ("VRHQwen25", {"max_num_frames": 5}), ("VRHQwen25", SEVEN_B),
            ("VRHQwen25Chat", {}), ("VRHQwen25Chat", {"max_num_frames": 7}), ("VRHQwen25Chat", {"fps": 1.0})]


@pytest.mark.parametrize("cls_name,args", BACKENDS, ids=lambda v: v if isinstance(v, str) else str(v))
def test_layout_matches_the_processor_at_7b_geometry(seven_b, tmp_path, cls_name, args):
    lm = backend(cls_name, seven_b, **args)
    vp = lm.processor.video_processor
    assert (vp.patch_size, vp.merge_size, vp.temporal_patch_size) == (14, 2, 2)
    token_id = lm.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    odd = 0
    for n, fps, w, h in CLIPS:
        path = write_clip(tmp_path / f"clip_{n}_{w}x{h}.mp4", n, fps, w, h)
        video = probe(path)
        assert (video.total_frames, video.fps, video.width, video.height) == (n, fps, w, h)
        inputs = fed_inputs(lm, path)
        grid = tuple(inputs["video_grid_thw"][0].tolist())
        assert backend_grid(lm, video) == grid, (n, w, h)
        fed = backend_frames(lm, video)
        odd += len(fed) % 2
        layout = video_layouts(inputs["input_ids"][0], token_id, inputs["video_grid_thw"], 2, 2, [fed],
                               [video.fps])[0]
        assert int((inputs["input_ids"][0] == token_id).sum()) == layout.n_tokens == grid[0] * grid[1] * grid[2] // 4
        frames = patch_frames(lm, inputs["pixel_values_videos"], n).view(grid[0], grid[1] * grid[2], 2)
        for g in range(grid[0]):
            # every patch of group g holds the same two source frames: the layout's, at the layout's times
            assert (frames[g] == frames[g, 0]).all()
            assert tuple(frames[g, 0].tolist()) == layout.group_frames(g)
            assert layout.group_seconds(g) == (frames[g, 0, 0].item() / fps, frames[g, 0, 1].item() / fps)
        fed_seen = frames[:, 0].flatten().tolist()
        assert fed_seen[:len(fed)] == fed and set(fed_seen[len(fed):]) <= {fed[-1]}
    if cls_name == "VRHQwen25" and args.get("max_num_frames") == 5:
        assert odd, "no clip gave an odd fed-frame count (the padded last group)"


@pytest.mark.parametrize("cls_name,args", [("VRHQwen25", {"max_num_frames": 5}), ("VRHQwen25Chat", {}),
                                           ("VRHQwen25Chat", {"max_num_frames": 7})])
def test_two_videos_in_one_request(seven_b, tmp_path, cls_name, args):
    """Only the first video is special: the simple backend subsamples it alone, the chat one sizes every video's
    nframes by it; each video's groups are read back from its own rows of pixel_values_videos."""
    from vrh_lmms.model.capture.video import fed_frames

    lm = backend(cls_name, seven_b, **args)
    token_id = lm.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    clips = [(9, 3, 160, 120), (21, 4, 224, 160)]
    paths = [write_clip(tmp_path / f"v{i}.mp4", *clip) for i, clip in enumerate(clips)]
    videos = [probe(p) for p in paths]
    inputs = fed_inputs(lm, *paths)
    fed = fed_frames(lm, videos)
    layouts = video_layouts(inputs["input_ids"][0], token_id, inputs["video_grid_thw"], 2, 2, fed,
                            [v.fps for v in videos])
    row = 0
    for (n, fps, _, _), layout in zip(clips, layouts):
        t, h, w = layout.grid
        frames = patch_frames(lm, inputs["pixel_values_videos"][row:row + t * h * w], n).view(t, h * w, 2)
        row += t * h * w
        assert [tuple(frames[g, 0].tolist()) for g in range(t)] == [layout.group_frames(g) for g in range(t)]
        assert (frames == frames[:, :1]).all()
    assert row == inputs["pixel_values_videos"].shape[0]
    if lm.is_simple:  # the second video keeps qwen_vl_utils' 2 fps sampling (10 of 21), the first is cut to 5
        assert [len(f) for f in fed] == [5, 10]
    else:  # nframes from the first video (9 frames -> 8, or max_num_frames 7 -> 6) for both
        assert [len(f) for f in fed] == [min(8, args.get("max_num_frames", 32) // 2 * 2)] * 2


@pytest.mark.parametrize("cls_name,args", [("VRHQwen25", {"max_num_frames": 5}), ("VRHQwen25Chat", {})])
def test_changing_one_frame_changes_exactly_its_group(tiny_checkpoints, tmp_path, cls_name, args):
    lm = backend(cls_name, tiny_checkpoints("qwen2_5_vl"), min_pixels=3136, max_pixels=12544, **args)
    token_id = lm.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    n, fps = 9, 3
    base = write_clip(tmp_path / "base.mp4", n, fps, 112, 84, [128] * n)
    video = probe(base)
    fed = backend_frames(lm, video)
    # simple, max_num_frames 5: fed 0 2 3 5 8 (8 padded); chat: nframes 8 of 9, frame 4 never fed
    assert fed == ([0, 2, 3, 5, 8] if lm.is_simple else [0, 1, 2, 3, 5, 6, 7, 8])
    batch = fed_inputs(lm, base)
    with zeroed_vision_attention(lm.model) as hooked:
        assert hooked > 0
        ref = layer0_inputs(lm.model, batch)[0]
        for f in (0, 4, n - 1):
            grey = [128] * n
            grey[f] = 30
            changed_batch = fed_inputs(lm, write_clip(tmp_path / f"f{f}.mp4", n, fps, 112, 84, grey))
            assert torch.equal(changed_batch["input_ids"], batch["input_ids"])
            diff = (layer0_inputs(lm.model, changed_batch)[0] - ref).abs().amax(-1)
            changed = set(torch.nonzero(diff > 1e-6).flatten().tolist())
            layout = video_layouts(batch["input_ids"][0], token_id, batch["video_grid_thw"], 2, 2, [fed],
                                   [video.fps])[0]
            groups = layout.groups_in(f / fps, f / fps)
            assert groups == ([] if f not in fed else [fed.index(f) // 2])
            expect = {p for g in groups for p in layout.group_positions(g)}
            assert changed == expect, (f, sorted(changed)[:5], sorted(expect)[:5])


QWEN3_BACKENDS = [("VRHQwen3", {}), ("VRHQwen3", {"max_num_frames": 5}), ("VRHQwen3", {"fps": 1.0})]


@pytest.mark.parametrize("cls_name,args", QWEN3_BACKENDS, ids=lambda v: v if isinstance(v, str) else str(v))
def test_qwen3_groups_timestamps_and_frames_match_the_processor(tiny_checkpoints, tmp_path, cls_name, args):
    """Qwen3-VL: one `<t seconds><|vision_start|>...<|vision_end|>` block per temporal group; each block's tokens,
    frames (read from pixel_values_videos) and written time agree with the layout."""
    import re

    from vrh_lmms.model_wrappers import qwen3_vl

    ckpt = tiny_checkpoints("qwen3_vl")
    text = ",".join(f"{k}={v}" for k, v in {"pretrained": ckpt, "dtype": "float32", **args}.items())
    lm = qwen3_vl.VRHQwen3.create_from_arg_string(text, {"batch_size": 1})
    vp = lm.processor.video_processor
    assert (vp.patch_size, vp.merge_size, vp.temporal_patch_size) == (16, 2, 2)
    token_id = lm.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    for n, fps, w, h in [(9, 3, 128, 96), (16, 4, 112, 112), (21, 4, 224, 160)]:
        path = write_clip(tmp_path / f"q3_{n}.mp4", n, fps, w, h)
        video = probe(path)
        inputs = fed_inputs(lm, path)
        fed = backend_frames(lm, video)
        ids = inputs["input_ids"][0]
        layout = video_layouts(ids, token_id, inputs["video_grid_thw"], 2, 2, [fed], [video.fps],
                               run_per_group=True)[0]
        t, gh, gw = layout.grid
        assert len(layout.starts) == t and int((ids == token_id).sum()) == t * gh * gw // 4
        x = inputs["pixel_values_videos"].double().view(-1, 3, 2, 16, 16)[:, 0] * 0.5 + 0.5
        grey = (x.mean((-1, -2)) * 255)[..., None] - torch.tensor(levels(n), dtype=torch.float64)
        frames = grey.abs().argmin(-1).view(t, gh * gw, 2)
        # the text before each block: `< t . t <unk> >` in the tiny tokenizer (digits and dots; `seconds` unknown)
        stamps = []
        for g in range(t):
            assert (frames[g] == frames[g, 0]).all() and tuple(frames[g, 0].tolist()) == layout.group_frames(g)
            before = lm.tokenizer.decode(ids[max(0, layout.starts[g] - 8):layout.starts[g]].tolist())
            stamps.append(re.findall(r"<([\d.]+)<unk>>", before.replace(" ", ""))[-1])
        assert stamps == [f"{layout.group_stamp(g):.1f}" for g in range(t)], (n, fed)
