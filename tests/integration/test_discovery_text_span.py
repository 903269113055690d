"""Discovery on text-span evidence (`vrh_synth_text_needle`) through the real lmms-eval backend of a tiny
Qwen2.5-VL: the captured attention of the answer rows on the needle's tokens equals eager attention
(`output_attentions=True`) on the very inputs discovery forwarded, the heads file's scores are the mean of those
per-sample masses, and the box-only Localization Heads cell is skipped with a note; `vrh-lmms sweep` and `report`
run on the task with that heads file."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from oracles.intervention_refs import eager_attentions
from vrh_lmms.tasks.common.text_needle import make_doc, needle_config, read_value

from vrh_lmms.discovery import collector as collector_mod
from vrh_lmms.discovery.run import DiscoverySpec, run_discovery, sidecars
from vrh_lmms.discovery.store import PartStore
from vrh_lmms.heads.heads_file import load_heads_file

torch.set_num_threads(1)
N = 2
CONFIG = {"n": N, "seed": 3, "pairs": 4, "format": "sentence"}


@pytest.fixture(scope="module")
def lm(tiny_checkpoints, tmp_path_factory):
    from vrh_lmms import lmms

    mp = pytest.MonkeyPatch()
    mp.setenv("VRH_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    mp.setenv("VRH_NEEDLE_CONFIG", json.dumps(CONFIG))
    ckpt = tiny_checkpoints("qwen2_5_vl")
    yield lmms.build_model("vrh_qwen25", f"pretrained={ckpt},dtype=float32")
    mp.undo()


@pytest.fixture(scope="module")
def discovered(lm, tmp_path_factory):
    """One discovery on the needle task; the inputs each doc was forwarded with, in doc order."""
    inputs, real_forward = {}, collector_mod.teacher_forced_inputs

    def forward(*args, **kwargs):
        batch = real_forward(*args, **kwargs)
        inputs[len(inputs)] = batch
        return batch

    mp = pytest.MonkeyPatch()
    mp.setattr(collector_mod, "teacher_forced_inputs", forward)
    out = tmp_path_factory.mktemp("needle") / "heads.json"
    run_discovery(DiscoverySpec(model="vrh_qwen25", model_args="pretrained=x", tasks=["vrh_synth_text_needle"],
                                output=str(out), limit=N, gen_kwargs="max_new_tokens=4"), lm=lm)
    mp.undo()
    return out, inputs


def test_needle_mass_equals_eager_attention(lm, discovered):
    out, inputs = discovered
    hf = load_heads_file(out)
    assert hf.scoring["evidence"] == "text"
    assert "localization_heads" in hf.scoring["skipped_cells"] and "localization_heads" not in hf.cells
    store = PartStore(sidecars(out)["parts"])
    keys = sorted(store.keys(), key=lambda k: int(k.rsplit("__", 1)[1]))
    assert len(keys) == N == len(inputs)
    masses = []
    for i, key in enumerate(keys):
        part, batch = store.read(key), inputs[i]
        ids = batch["input_ids"][0]
        needle = make_doc(i, needle_config())["vrh_evidence"]["text"]
        # the key set: exactly the tokens spelling the needle, once, in the prompt
        text = lm.tokenizer.decode(ids.tolist(), skip_special_tokens=False)
        start = text.index(needle)
        words_before = len(text[:start].split())
        span = list(range(words_before, words_before + len(needle.split())))
        assert lm.tokenizer.decode(ids[span].tolist()) == needle
        assert part.meta["evidence"] == "text" and part.meta["n_box_tokens"] == len(span)
        prompt_len, n = part.meta["prompt_len"], part.meta["n_answer"]
        assert n >= 1 and span[-1] < prompt_len
        attn = eager_attentions(lm.model, batch)[0].double()
        rows = list(range(prompt_len - 1, prompt_len - 1 + n))
        expect = attn[:, :, rows][..., span].sum(-1).mean(-1).numpy()
        np.testing.assert_allclose(part.stats["out_sum"], expect, atol=2e-5)
        masses.append(expect)
    np.testing.assert_allclose(hf.scores, np.mean(masses, axis=0), atol=2e-5)
    assert hf.scoring["cell"] == "out,sum,mean"


def test_needle_scoring_reads_the_value():
    assert read_value("o 72", "o") == "72" and read_value("72", "o") == "72"
    assert read_value("purple circle 95 .", "purple circle") == "95"
    assert read_value("o 7 2", "o") == "7 2" and read_value("  ", "o") is None


def test_sweep_and_report_run_on_the_needle_task(lm, discovered, tmp_path):
    from vrh_lmms.report import ReportSettings, build_report
    from vrh_lmms.sweep.plan import plan_configurations
    from vrh_lmms.sweep.run import SweepSpec, run_sweep

    heads, _ = discovered
    configs = plan_configurations([1], 1, False, ["zero"])
    spec = SweepSpec("vrh_qwen25", "pretrained=x", ["vrh_synth_text_needle"], str(heads), configs, limit=N,
                     gen_kwargs="max_new_tokens=4")
    sweep = run_sweep(spec, tmp_path / "sweep", lm=lm, progress=False)
    ids = sorted(p.name for p in (sweep / "configs").iterdir())
    assert ids == ["baseline", "random1_s0", "top1"]
    top1 = json.loads((sweep / "configs" / "top1" / "results.json").read_text())
    assert top1["vrh"]["ablation"]["heads"] == [str(load_heads_file(heads).ranking[0])]
    report = build_report([sweep], tmp_path / "report", ReportSettings(plots=False, n_resamples=200))
    text = (tmp_path / "report" / "report.md").read_text()
    assert "vrh_synth_text_needle" in text and "top1" in text and report


def test_localization_heads_as_primary_is_refused_on_text_docs(lm, tmp_path):
    from vrh_lmms.errors import VRHError

    spec = DiscoverySpec(model="vrh_qwen25", model_args="pretrained=x", tasks=["vrh_synth_text_needle"],
                         output=str(tmp_path / "heads.json"), limit=N, gen_kwargs="max_new_tokens=4",
                         primary="localization_heads")
    with pytest.raises(VRHError, match="localization_heads needs box evidence; these docs carry text evidence"):
        run_discovery(spec, lm=lm)
    assert not (tmp_path / "heads.json").exists()
