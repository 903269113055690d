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
from oracles.intervention_refs import answer_rows_mass, eager_attentions

from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.runs.discovery import collector as collector_mod
from vrh_lmms.runs.discovery.run import DiscoverySpec, run_discovery, sidecars
from vrh_lmms.runs.discovery.store import PartStore
from vrh_lmms.tasks.common.text_needle import make_doc, needle_config, read_value

torch.set_num_threads(1)
N = 2
CONFIG = {"n": N, "seed": 3, "pairs": 4, "format": "sentence"}


@pytest.fixture(scope="module")
def lm(tiny_checkpoints, tmp_path_factory):
    from vrh_lmms.harness import lmms

    mp = pytest.MonkeyPatch()
    mp.setenv("VRH_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    mp.setenv("VRH_NEEDLE_CONFIG", json.dumps(CONFIG))
    ckpt = tiny_checkpoints("qwen2_5_vl")
    yield lmms.build_model("vrh_qwen25", f"pretrained={ckpt},dtype=float32")
    mp.undo()


def _discover(lm, out, **spec) -> dict[tuple[str, str], dict]:
    """Run discovery on the needle task; the inputs each doc was forwarded with, by (doc key, query words): the
    real question and, with null_query, the content-free one ("N/A")."""
    inputs, seen = {}, {}
    real_forward, real_sample = collector_mod.teacher_forced_inputs, collector_mod.SampleCollector._sample

    def forward(*args, **kwargs):
        seen["batch"] = real_forward(*args, **kwargs)
        return seen["batch"]

    def sample(self, tensors, answer, expression, target, kind, key, *args, **kwargs):
        result = real_sample(self, tensors, answer, expression, target, kind, key, *args, **kwargs)
        inputs[key, expression] = seen.pop("batch")
        return result

    mp = pytest.MonkeyPatch()
    mp.setattr(collector_mod, "teacher_forced_inputs", forward)
    mp.setattr(collector_mod.SampleCollector, "_sample", sample)
    try:
        run_discovery(DiscoverySpec(model="vrh_qwen25", model_args="pretrained=x", tasks=["vrh_synth_text_needle"],
                                    output=str(out), limit=N, gen_kwargs="max_new_tokens=4", **spec), lm=lm)
    finally:
        mp.undo()
    return inputs


@pytest.fixture(scope="module")
def discovered(lm, tmp_path_factory):
    out = tmp_path_factory.mktemp("needle") / "heads.json"
    return out, _discover(lm, out)


def _needle_span(lm, ids: torch.Tensor, needle: str) -> list[int]:
    """The positions of the words spelling the needle, found by word count in the decoded prompt (the tiny
    tokenizer spells one word per token), independently of the offsets discovery uses."""
    text = lm.tokenizer.decode(ids.tolist(), skip_special_tokens=False)
    assert text.count(needle) == 1
    words_before = len(text[:text.index(needle)].split())
    span = list(range(words_before, words_before + len(needle.split())))
    assert lm.tokenizer.decode(ids[span].tolist()) == needle
    return span


def _eager_mass(lm, batch, part, span: list[int]) -> np.ndarray:
    prompt_len, n = batch["input_ids"].shape[1] - part.meta["n_answer"], part.meta["n_answer"]
    assert n >= 1 and span[-1] < prompt_len
    return answer_rows_mass(eager_attentions(lm.model, batch)[0].double(), prompt_len, n, span)


def test_needle_mass_equals_eager_attention(lm, discovered):
    out, inputs = discovered
    hf = load_heads_file(out)
    assert hf.scoring["evidence"] == "text"
    assert "localization_heads" in hf.scoring["skipped_cells"] and "localization_heads" not in hf.cells
    store = PartStore(sidecars(out)["parts"])
    keys = sorted(store.keys(), key=lambda k: int(k.rsplit("__", 1)[1]))
    assert len(keys) == N == len(inputs)
    masses = []
    for key in keys:
        part = store.read(key)
        doc = make_doc(int(key.rsplit("__", 1)[1]), needle_config())
        batch = inputs[key, doc["vrh_evidence"]["query"]]
        span = _needle_span(lm, batch["input_ids"][0], doc["vrh_evidence"]["text"])
        assert part.meta["evidence"] == "text" and part.meta["n_box_tokens"] == len(span)
        assert part.meta["prompt_len"] == batch["input_ids"].shape[1] - part.meta["n_answer"]
        expect = _eager_mass(lm, batch, part, span)
        np.testing.assert_allclose(part.stats["out_sum"], expect, atol=2e-5)
        masses.append(expect)
    np.testing.assert_allclose(hf.scores, np.mean(masses, axis=0), atol=2e-5)
    assert hf.scoring["cell"] == "out,sum,mean"


def test_null_question_scores_the_needle_in_the_content_free_prompt(lm, tmp_path):
    """Null-question calibration carried over to text spans: the content-free prompt (the question's words replaced
    by "N/A") still holds the needle, at other positions; its mass there is eager attention, and the heads file's
    scores are the real minus the null mass, averaged."""
    from vrh_lmms.runs.discovery.controls import NULL_EXPRESSION, NULL_PREFIX

    out = tmp_path / "heads.json"
    inputs = _discover(lm, out, null_query=True)
    store = PartStore(sidecars(out)["parts"])
    diffs = []
    for key in store.keys():
        part = store.read(key)
        doc = make_doc(int(key.rsplit("__", 1)[1]), needle_config())
        assert part.meta["null_query"] is True
        real, null = inputs[key, doc["vrh_evidence"]["query"]], inputs[key, NULL_EXPRESSION]
        assert null["input_ids"].shape[1] != real["input_ids"].shape[1]
        needle = doc["vrh_evidence"]["text"]
        span = _needle_span(lm, null["input_ids"][0], needle)
        np.testing.assert_allclose(part.stats[NULL_PREFIX + "out_sum"], _eager_mass(lm, null, part, span), atol=2e-5)
        diffs.append(part.stats["out_sum"] - part.stats[NULL_PREFIX + "out_sum"])
    np.testing.assert_allclose(load_heads_file(out).scores, np.mean(diffs, axis=0), atol=2e-5)


def test_needle_scoring_reads_the_value():
    assert read_value("o 72", "o") == "72" and read_value("72", "o") == "72"
    assert read_value("purple circle 95 .", "purple circle") == "95"
    assert read_value("o 7 2", "o") == "7 2" and read_value("  ", "o") is None


def test_sweep_and_report_run_on_the_needle_task(lm, discovered, tmp_path):
    from vrh_lmms.base.heads.plan import plan_configurations
    from vrh_lmms.report import ReportSettings, build_report
    from vrh_lmms.runs.sweep.run import SweepSpec, run_sweep

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
    from vrh_lmms.base.errors import VRHError

    spec = DiscoverySpec(model="vrh_qwen25", model_args="pretrained=x", tasks=["vrh_synth_text_needle"],
                         output=str(tmp_path / "heads.json"), limit=N, gen_kwargs="max_new_tokens=4",
                         primary="localization_heads")
    with pytest.raises(VRHError, match="localization_heads needs box evidence; these docs carry text evidence"):
        run_discovery(spec, lm=lm)
    assert not (tmp_path / "heads.json").exists()
