"""Discovery on audio evidence (`vrh_synth_audio_needle`) through lmms-eval's qwen2_5_omni backend on the tiny
Qwen2.5-Omni: the key set is exactly the audio tokens standing for the needle's seconds (the layout of
vrh_lmms.model.capture.audio on the clip the backend fed), the captured attention of the answer rows on it equals eager
attention (`output_attentions=True`) on the very inputs discovery forwarded, the heads file's scores are the mean of
those masses, the box-only Localization Heads cell is skipped; `vrh-lmms sweep` and `report` run on the task."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from oracles.intervention_refs import answer_rows_mass, eager_attentions

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.runs.discovery import collector as collector_mod
from vrh_lmms.runs.discovery.audio_evidence import audio_target
from vrh_lmms.runs.discovery.controls import IMAGE_MASS
from vrh_lmms.runs.discovery.run import DiscoverySpec, run_discovery, sidecars
from vrh_lmms.runs.discovery.store import PartStore
from vrh_lmms.tasks.common.audio_needle import audio_config, make_doc, read_count, render

torch.set_num_threads(1)
N = 2
TASK = "vrh_synth_audio_needle"
CONFIG = {"n": N, "seed": 3, "seconds": 2.6, "value_max": 3, "distractors": 2}  # 2.6 s: past one 2 s chunk
MODEL = "vrh_qwen25_omni"


@pytest.fixture(scope="module")
def lm(tiny_checkpoints, tmp_path_factory):
    from vrh_lmms.harness import lmms

    mp = pytest.MonkeyPatch()
    mp.setenv("VRH_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    mp.setenv("VRH_AUDIO_CONFIG", json.dumps(CONFIG))
    yield lmms.build_model(MODEL, f"pretrained={tiny_checkpoints('qwen2_5_omni')},dtype=float32")
    mp.undo()


@pytest.fixture(scope="module")
def discovered(lm, tmp_path_factory):
    """One discovery on the audio needle task; the inputs each doc was forwarded with, in doc order."""
    inputs, real_forward = {}, collector_mod.teacher_forced_inputs

    def forward(*args, **kwargs):
        batch = real_forward(*args, **kwargs)
        inputs[len(inputs)] = batch
        return batch

    mp = pytest.MonkeyPatch()
    mp.setenv("VRH_AUDIO_CONFIG", json.dumps(CONFIG))
    mp.setattr(collector_mod, "teacher_forced_inputs", forward)
    out = tmp_path_factory.mktemp("audio") / "heads.json"
    run_discovery(DiscoverySpec(model=MODEL, model_args="pretrained=x", tasks=[TASK], output=str(out), limit=N,
                                gen_kwargs="max_new_tokens=3"), lm=lm)
    mp.undo()
    return out, inputs


def test_audio_mass_equals_eager_attention(lm, discovered):
    out, inputs = discovered
    hf = load_heads_file(out)
    assert hf.scoring["evidence"] == "audio"
    assert "localization_heads" in hf.scoring["skipped_cells"] and "localization_heads" not in hf.cells
    store = PartStore(sidecars(out)["parts"])
    keys = sorted(store.keys(), key=lambda k: int(k.rsplit("__", 1)[1]))
    assert len(keys) == N == len(inputs)
    audio_id = lm.processor.audio_token_id
    masses = []
    for i, key in enumerate(keys):
        part, batch = store.read(key), inputs[i]
        ids = batch["input_ids"][0]
        doc = make_doc(i, {**audio_config(), **CONFIG})
        t0, t1 = doc["vrh_evidence"]["seconds"]
        # the key set, independently: the audio run's tokens k with [0.04 k, 0.04 (k + 1)) meeting [t0, t1)
        run = torch.nonzero(ids == audio_id).flatten()
        assert run.numel() == (((len(render(json.loads(doc["vrh_audio_plan"]))) + 159) // 160 - 1) // 2 + 1 - 2
                               ) // 2 + 1
        span = [int(run[k]) for k in range(run.numel()) if 0.04 * k < t1 and 0.04 * (k + 1) > t0]
        assert part.meta["evidence"] == "audio" and part.meta["n_box_tokens"] == len(span) > 3
        assert part.meta["n_image_tokens"] == run.numel()
        prompt_len, n = part.meta["prompt_len"], part.meta["n_answer"]
        assert n >= 1 and span[-1] < prompt_len
        attn = eager_attentions(lm.model, batch)[0].double()
        expect = answer_rows_mass(attn, prompt_len, n, span)
        np.testing.assert_allclose(part.stats["out_sum"], expect, atol=2e-5)
        media = answer_rows_mass(attn, prompt_len, n, run.tolist())
        np.testing.assert_allclose(part.stats[IMAGE_MASS], media, atol=2e-5)  # media = every audio token
        masses.append(expect)
    np.testing.assert_allclose(hf.scores, np.mean(masses, axis=0), atol=2e-5)
    assert hf.scoring["cell"] == "out,sum,mean"


def test_task_docs_and_scoring():
    cfg = {**audio_config(), **CONFIG}
    doc = make_doc(1, cfg)
    assert make_doc(1, cfg) == doc  # a pure function of (seed, index)
    plan = json.loads(doc["vrh_audio_plan"])
    wav = render(plan)
    assert wav.dtype == np.float32 and wav.size == doc["vrh_evidence"]["samples"] == 2.6 * 16000
    t0, t1 = doc["vrh_evidence"]["seconds"]
    assert t1 - t0 == pytest.approx(int(doc["vrh_target"]) * 0.16 - 0.08)
    assert all(b <= t0 or a >= t1 for a, b, _ in plan["hums"])
    # the beeps are where the evidence says: 1 kHz energy inside [t0, t1], none outside
    spec = np.abs(np.fft.rfft(wav.reshape(-1, 160), axis=1))[:, 10]  # 1 kHz bin of 10 ms frames
    start = np.arange(spec.size) * 0.01
    inside, outside = (start >= t0) & (start + 0.01 <= t1), (start + 0.01 <= t0) | (start >= t1)
    assert spec[inside].max() > 10 * spec[outside].max()
    assert read_count("3") == "3" and read_count("there are 12 beeps") == "12" and read_count("none") is None


def test_malformed_audio_evidence_is_refused_in_one_line():
    with pytest.raises(VRHError, match=r"doc 7: vrh_evidence of kind audio needs `seconds: \[t0, t1\]`"):
        audio_target({"vrh_evidence": {"kind": "audio", "seconds": [2.0, 1.0]}}, "doc 7")
    with pytest.raises(VRHError, match="`index` must be a clip number"):
        audio_target({"vrh_evidence": {"kind": "audio", "seconds": [0, 1], "index": -1}}, "doc")


def test_sweep_and_report_run_on_the_audio_task(lm, discovered, tmp_path, monkeypatch):
    from vrh_lmms.base.heads.plan import plan_configurations
    from vrh_lmms.report import ReportSettings, build_report
    from vrh_lmms.runs.sweep.run import SweepSpec, run_sweep

    monkeypatch.setenv("VRH_AUDIO_CONFIG", json.dumps(CONFIG))
    heads, _ = discovered
    configs = plan_configurations([1], 1, False, ["zero"])
    spec = SweepSpec(MODEL, "pretrained=x", [TASK], str(heads), configs, limit=N, gen_kwargs="max_new_tokens=3")
    sweep = run_sweep(spec, tmp_path / "sweep", lm=lm, progress=False)
    ids = sorted(p.name for p in (sweep / "configs").iterdir())
    assert ids == ["baseline", "random1_s0", "top1"]
    top1 = json.loads((sweep / "configs" / "top1" / "results.json").read_text())
    assert top1["vrh"]["ablation"]["heads"] == [str(load_heads_file(heads).ranking[0])]
    assert top1["vrh"]["family"] == "qwen2_5_omni"
    report = build_report([sweep], tmp_path / "report", ReportSettings(plots=False, n_resamples=200))
    text = (tmp_path / "report" / "report.md").read_text()
    assert TASK in text and "top1" in text and report


def test_evidence_that_disagrees_with_the_fed_clip_is_refused(lm, discovered):
    from vrh_lmms.runs.discovery.audio_evidence import audio_keys
    from vrh_lmms.runs.discovery.evidence import KeyContext

    _, inputs = discovered
    batch = inputs[0]
    ids = batch["input_ids"][0]
    ctx = KeyContext("qwen2_5_omni", lm.processor, lm.tokenizer, lm, batch, ids, ids.numel())
    fed = int(batch["feature_attention_mask"].sum()) * 160
    ok = audio_keys(audio_target({"vrh_evidence": {"kind": "audio", "seconds": [0.1, 0.2], "samples": fed}}), ctx)
    assert int(ok.evidence.sum()) == 3  # tokens 2, 3, 4: [0.08, 0.12), [0.12, 0.16), [0.16, 0.2)
    with pytest.raises(VRHError, match="samples=16000 disagrees with the clip the backend fed"):
        audio_keys(audio_target({"vrh_evidence": {"kind": "audio", "seconds": [0.1, 0.2], "samples": 16000}}), ctx)
    with pytest.raises(VRHError, match="audio index 1: the prompt has 1 audio clip"):
        audio_keys(audio_target({"vrh_evidence": {"kind": "audio", "seconds": [0.1, 0.2], "index": 1}}), ctx)
    with pytest.raises(VRHError, match="start after the clip ends"):
        audio_keys(audio_target({"vrh_evidence": {"kind": "audio", "seconds": [9.0, 9.5]}}), ctx)
