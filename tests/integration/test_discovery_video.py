"""Discovery on video-span evidence (`vrh_synth_needle_clip`) through the real lmms-eval backend of a tiny
Qwen2.5-VL: the evidence key set is exactly the tokens of the temporal groups whose fed frames show the needle scene
(told apart by the frames the backend handed its processor, not by the layout module), the captured attention on it
equals eager attention on the very inputs discovery forwarded, and `vrh-lmms sweep` and `report` run on the task.
A missing clip and a span without a fed frame are one-line errors."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from oracles.intervention_refs import answer_rows_mass, eager_attentions

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.runs.discovery import collector as collector_mod
from vrh_lmms.runs.discovery.run import DiscoverySpec, run_discovery, sidecars
from vrh_lmms.runs.discovery.store import PartStore
from vrh_lmms.runs.discovery.video_evidence import video_keys, video_target
from vrh_lmms.tasks.common.needle_clip import clip_config, clip_frames, make_doc

torch.set_num_threads(1)
N = 2
CONFIG = {"n": N, "seed": 3, "scenes": 4, "frames_per_scene": 4, "fps": 4, "size": 112}
ARGS = "pretrained={},dtype=float32,min_pixels=3136,max_pixels=12544"
TASK = "vrh_synth_needle_clip"


@pytest.fixture(scope="module")
def lm(tiny_checkpoints, tmp_path_factory):
    from vrh_lmms.harness import lmms

    mp = pytest.MonkeyPatch()
    mp.setenv("VRH_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    mp.setenv("VRH_CLIP_CONFIG", json.dumps(CONFIG))
    ckpt = tiny_checkpoints("qwen2_5_vl")
    yield lmms.build_model("vrh_qwen25", ARGS.format(ckpt))
    mp.undo()


@pytest.fixture(scope="module")
def discovered(lm, tmp_path_factory):
    return discover(lm, "vrh_qwen25", tmp_path_factory.mktemp("clip") / "heads.json")


@pytest.fixture(scope="module")
def qwen3(tiny_checkpoints, tmp_path_factory):
    """A tiny Qwen3-VL through `vrh_qwen3` (the chat backend; fps=2, as its default nframes=32 needs 32 frames)."""
    from vrh_lmms.harness import lmms

    mp = pytest.MonkeyPatch()
    mp.setenv("VRH_CACHE_DIR", str(tmp_path_factory.mktemp("cache3")))
    mp.setenv("VRH_CLIP_CONFIG", json.dumps(CONFIG))
    ckpt = tiny_checkpoints("qwen3_vl")
    lm3 = lmms.build_model("vrh_qwen3", f"pretrained={ckpt},dtype=float32,min_pixels=4096,max_pixels=16384,fps=2")
    yield lm3, discover(lm3, "vrh_qwen3", tmp_path_factory.mktemp("clip3") / "heads.json")
    mp.undo()


def discover(lm, model: str, out, **spec):
    """One discovery on the clip task; per doc (in order): the forwarded inputs, the frames the backend gave its
    processor, and the KeyContext the evidence kind read."""
    inputs, videos, contexts = {}, [], []
    real_forward, real_ctx = collector_mod.teacher_forced_inputs, collector_mod.KeyContext
    proc_cls = type(lm.processor)
    real_call = proc_cls.__call__

    def forward(*args, **kwargs):
        batch = real_forward(*args, **kwargs)
        inputs[len(inputs)] = batch
        return batch

    def call(self, *args, **kwargs):
        videos.append(kwargs.get("videos"))
        return real_call(self, *args, **kwargs)

    def context(*args, **kwargs):
        contexts.append(real_ctx(*args, **kwargs))
        return contexts[-1]

    mp = pytest.MonkeyPatch()
    mp.setattr(collector_mod, "teacher_forced_inputs", forward)
    mp.setattr(collector_mod, "KeyContext", context)
    mp.setattr(proc_cls, "__call__", call)
    run_discovery(DiscoverySpec(model=model, model_args="pretrained=x", tasks=[TASK], output=str(out),
                                limit=N, gen_kwargs="max_new_tokens=3", **spec), lm=lm)
    mp.undo()
    return out, inputs, videos, contexts


def needle_groups(i: int, fed: torch.Tensor) -> list[int]:
    """Temporal groups whose fed frames are the needle scene's, each fed frame matched to its nearest source frame."""
    cfg = {**clip_config(), **CONFIG}
    frames, at, _ = clip_frames(i, cfg)
    source = torch.tensor(np.stack(frames)).permute(0, 3, 1, 2).float()
    source = torch.nn.functional.interpolate(source, size=tuple(fed.shape[-2:]), mode="bilinear", antialias=True)
    nearest = [int((source - f).abs().mean((1, 2, 3)).argmin()) for f in fed.float()]
    scenes = [k // cfg["frames_per_scene"] for k in nearest]
    return sorted({j // 2 for j, s in enumerate(scenes) if s == at})


def test_video_mass_equals_eager_attention(lm, discovered):
    hf, masses = check_masses(lm, *discovered[:3])
    np.testing.assert_allclose(hf.scores, masses.mean(0), atol=2e-5)


def test_video_mass_equals_eager_attention_qwen3(qwen3):
    """Qwen3-VL: each temporal group its own `<t seconds><|vision_start|>...<|vision_end|>` block."""
    lm3, found = qwen3
    hf, masses = check_masses(lm3, *found[:3])
    np.testing.assert_allclose(hf.scores, masses.mean(0), atol=2e-5)


def test_null_query_on_video_docs_equals_eager_attention(lm, tiny_checkpoints, tmp_path):
    """`--null-query`: the content-free question ("N/A" for the question's words) is scored on the same groups,
    found again in its own prompt; with the question before the video (image_position=after_prompt) they move."""
    from vrh_lmms.harness import lmms
    from vrh_lmms.runs.discovery.controls import NULL_PREFIX

    after = lmms.build_model("vrh_qwen25", ARGS.format(tiny_checkpoints("qwen2_5_vl")) + ",image_position=after_prompt")
    out, inputs, videos, _ = discover(after, "vrh_qwen25", tmp_path / "heads.json", null_query=True)
    assert len(inputs) == 2 * N  # per doc: the real prompt, then the content-free one
    real = {i: inputs[2 * i] for i in range(N)}
    null = {i: inputs[2 * i + 1] for i in range(N)}
    video_id = lm.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    first = [int((b["input_ids"][0] == video_id).nonzero()[0]) for b in (real[0], null[0])]
    assert first[0] != first[1], "the content-free prompt did not move the video"
    hf, masses = check_masses(after, out, real, videos)
    _, null_masses = check_masses(after, out, null, videos, prefix=NULL_PREFIX)
    np.testing.assert_allclose(hf.scores, (masses - null_masses).mean(0), atol=2e-5)  # what the question adds


def check_masses(lm, out, inputs, videos, prefix: str = ""):
    hf = load_heads_file(out)
    assert hf.scoring["evidence"] == "video"
    assert "localization_heads" in hf.scoring["skipped_cells"]
    store = PartStore(sidecars(out)["parts"])
    keys = sorted(store.keys(), key=lambda k: int(k.rsplit("__", 1)[1]))
    assert len(keys) == N == len(inputs) == len(videos)
    video_id = lm.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    masses = []
    for i, key in enumerate(keys):
        part, batch = store.read(key), inputs[i]
        if prefix:
            assert part.meta["null_query"]
        ids = batch["input_ids"][0]
        where = (ids == video_id).nonzero().flatten().tolist()  # group g: the g-th h*w/4 video tokens, in order
        t, h, w = batch["video_grid_thw"][0].tolist()
        per = h * w // 4
        assert len(where) == t * per
        groups = needle_groups(i, videos[i][0])
        assert groups, "the backend fed no frame of the needle scene"
        span = [where[g * per + k] for g in groups for k in range(per)]
        assert part.meta["evidence"] == "video" and part.meta["n_box_tokens"] == len(span)
        assert part.meta["n_image_tokens"] == t * per
        n = part.meta["n_answer"]
        prompt_len = batch["input_ids"].shape[1] - n
        assert n >= 1
        attn = eager_attentions(lm.model, batch)[0].double()
        expect = answer_rows_mass(attn, prompt_len, n, span)
        np.testing.assert_allclose(part.stats[prefix + "out_sum"], expect, atol=2e-5)
        masses.append(expect)
    return hf, np.array(masses)


def test_sweep_and_report_run_on_the_clip_task(lm, discovered, tmp_path):
    from vrh_lmms.base.heads.plan import plan_configurations
    from vrh_lmms.report import ReportSettings, build_report
    from vrh_lmms.runs.sweep.run import SweepSpec, run_sweep

    heads = discovered[0]
    configs = plan_configurations([1], 1, False, ["zero"])
    spec = SweepSpec("vrh_qwen25", "pretrained=x", [TASK], str(heads), configs, limit=N, gen_kwargs="max_new_tokens=3")
    sweep = run_sweep(spec, tmp_path / "sweep", lm=lm, progress=False)
    assert sorted(p.name for p in (sweep / "configs").iterdir()) == ["baseline", "random1_s0", "top1"]
    top1 = json.loads((sweep / "configs" / "top1" / "results.json").read_text())
    assert top1["vrh"]["ablation"]["heads"] == [str(load_heads_file(heads).ranking[0])]
    base = sweep / "configs" / "baseline"
    records = [json.loads(line)["vrh_record"] for line in (base / f"samples_{TASK}.jsonl").read_text().splitlines()]
    assert len(records) == N and all(r["correct"] == (r["pred"] == r["target"]) for r in records)
    acc = json.loads((base / "results.json").read_text())["results"][TASK]["acc,none"]
    assert acc == pytest.approx(np.mean([r["correct"] for r in records]))
    build_report([sweep], tmp_path / "report", ReportSettings(plots=False, n_resamples=200))
    text = (tmp_path / "report" / "report.md").read_text()
    assert TASK in text and "top1" in text


def test_span_outside_the_clip_or_between_fed_frames_is_refused(lm, discovered, tmp_path):
    _, _, _, contexts = discovered
    doc = make_doc(0, {**clip_config(), **CONFIG}, tmp_path)
    target = video_target(doc, "doc 0")
    ctx = contexts[0]  # 16 frames at 4 fps, all fed (the chat backend: nframes = min(max_num_frames, 16))
    assert not lm.is_simple
    assert video_keys(target, ctx).evidence.sum() > 0
    with pytest.raises(VRHError, match=r"span \[3.5, 9\] s ends past .*clip_3_0.mp4 \(4 s\)"):
        video_keys(dataclasses.replace(target, seconds=(3.5, 9.0)), ctx)
    with pytest.raises(VRHError, match=r"span \[0.3, 0.45\] s holds no fed frame .* \(fed frames at 0, 0.25, 0.5,"):
        video_keys(dataclasses.replace(target, seconds=(0.3, 0.45)), ctx)
    with pytest.raises(VRHError, match="needs `seconds` \\[t0, t1\\] with 0 <= t0 <= t1, got \\[2, 1\\]"):
        video_target({**doc, "vrh_evidence": {"kind": "video", "seconds": [2, 1]}}, "doc 0")


def test_missing_clip_is_one_clear_error(lm, tmp_path, monkeypatch):
    from vrh_lmms.tasks.common import needle_clip

    real = needle_clip.make_doc

    def gone(i, cfg, folder):
        doc = real(i, cfg, folder)
        return {**doc, "vrh_videos": [str(tmp_path / "gone.mp4")]}

    monkeypatch.setattr(needle_clip, "make_doc", gone)
    spec = DiscoverySpec(model="vrh_qwen25", model_args="pretrained=x", tasks=[TASK],
                         output=str(tmp_path / "heads.json"), limit=1, gen_kwargs="max_new_tokens=2")
    with pytest.raises(VRHError, match=f"^{TASK}: video file .*gone.mp4 does not exist$"):
        run_discovery(spec, lm=lm)


def test_cli_discover_sweep_report_on_the_clip_task(tiny_checkpoints, tmp_path, monkeypatch, capfd):
    """The commands end to end (small n); a clip gone from the cache is one `vrh-lmms: error:` line."""
    from vrh_lmms.cli import main

    monkeypatch.setenv("VRH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("VRH_CLIP_CONFIG", json.dumps(CONFIG))
    common = ["--model", "vrh_qwen25", "--model_args", ARGS.format(tiny_checkpoints("qwen2_5_vl")), "--tasks", TASK,
              "--limit", str(N), "--gen-kwargs", "max_new_tokens=3"]
    heads = tmp_path / "d" / "heads.json"
    assert main(["discover", *common, "--output", str(heads)]) == 0
    assert load_heads_file(heads).scoring["evidence"] == "video"
    assert main(["sweep", *common, "--heads-file", str(heads), "--k", "1", "--random-seeds", "1",
                 "--output", str(tmp_path / "sweep")]) == 0
    assert main(["report", str(tmp_path / "sweep"), "--output", str(tmp_path / "report"), "--no-plots",
                 "--n-resamples", "200"]) == 0
    assert TASK in (tmp_path / "report" / "report.md").read_text()
    from vrh_lmms.tasks.common import needle_clip

    real = needle_clip.make_doc
    monkeypatch.setattr(needle_clip, "make_doc", lambda i, cfg, folder: {**real(i, cfg, folder),
                                                                         "vrh_videos": [str(tmp_path / "gone.mp4")]})
    capfd.readouterr()
    assert main(["discover", *common, "--output", str(tmp_path / "d2" / "heads.json")]) == 2
    captured = capfd.readouterr()
    err = captured.err + captured.out
    # (an unfinished progress bar may precede the line on the terminal)
    lines = [line.split("vrh-lmms: error: ", 1)[1] for line in err.splitlines() if "vrh-lmms: error: " in line]
    assert lines == [f"{TASK}: video file {tmp_path / 'gone.mp4'} does not exist"]
    assert "Traceback" not in err
