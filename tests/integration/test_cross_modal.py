"""The same fact in three modalities (`vrh_synth_fact_text`, `_image`, `_audio`) through lmms-eval's backends on tiny
models: discovery on each task through vrh_qwen25_omni (and the text and image tasks through vrh_qwen25), the
captured attention of the answer rows on the evidence equals eager attention (`output_attentions=True`) on the very
inputs discovery forwarded, with the evidence positions derived here independently (the needle's token run; the
merged cells of the picture at least half inside the box, else the one holding its centre; the audio tokens whose
0.04 s span meets the beeps' seconds); `vrh-lmms compare-heads` on the three heads files (overlap, chance, Spearman,
checked against scipy); a sweep of the audio task's heads on the text task beside the text task's own heads gives
the report's cross-ablation rows (`top1@task:vrh_synth_fact_audio`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from oracles.intervention_refs import answer_rows_mass, eager_attentions

from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.runs.discovery import collector as collector_mod
from vrh_lmms.runs.discovery.controls import IMAGE_MASS
from vrh_lmms.runs.discovery.run import DiscoverySpec, run_discovery, sidecars
from vrh_lmms.runs.discovery.store import PartStore
from vrh_lmms.tasks.common.cross_modal import DEFAULTS, make_doc

torch.set_num_threads(1)
N = 2
# 2.6 s clips (past one 2 s audio chunk); text_image: lmms-eval's qwen2_5_omni backend drops a prompt without media,
# so on Omni the text doc shows a plain picture; on Qwen2.5-VL it is text only
CONFIG = {"n": N, "seed": 3, "seconds": 2.6, "value_max": 3, "distractors": 2, "text_image": 56}
CONFIGS = {"qwen2_5_omni": CONFIG, "qwen2_5_vl": {**CONFIG, "text_image": 0}}
FAMILIES = {"qwen2_5_omni": ("vrh_qwen25_omni", "<|IMAGE|>", ("text", "image", "audio")),
            "qwen2_5_vl": ("vrh_qwen25", "<|image_pad|>", ("text", "image"))}
CASES = [(f, m) for f, (_, _, mods) in FAMILIES.items() for m in mods]


@pytest.fixture(scope="module")
def models(tiny_checkpoints, tmp_path_factory):
    """Family -> its lmms-eval model on the tiny checkpoint, built once."""
    from vrh_lmms.harness import lmms

    mp = pytest.MonkeyPatch()
    mp.setenv("VRH_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    mp.setenv("VRH_FACT_CONFIG", json.dumps(CONFIG))
    built: dict[str, object] = {}

    def get(family: str):
        if family not in built:
            built[family] = lmms.build_model(FAMILIES[family][0],
                                             f"pretrained={tiny_checkpoints(family)},dtype=float32")
        return built[family]

    yield get
    mp.undo()


@pytest.fixture(scope="module")
def discovered(models, tmp_path_factory):
    """(family, modality) -> (heads file, the inputs each doc was forwarded with, by doc id), discovered once."""
    done: dict[tuple[str, str], tuple] = {}

    def get(family: str, modality: str):
        if (family, modality) in done:
            return done[family, modality]
        inputs, current = {}, []
        real_forward, real_call = collector_mod.teacher_forced_inputs, collector_mod.SampleCollector.__call__

        def call(self, ctx, *args, **kwargs):  # lmms-eval orders docs its own way: key the inputs by doc id
            current.append(int(ctx.doc_id))
            return real_call(self, ctx, *args, **kwargs)

        def forward(*args, **kwargs):
            batch = real_forward(*args, **kwargs)
            inputs.setdefault(current[-1], batch)
            return batch

        mp = pytest.MonkeyPatch()
        mp.setenv("VRH_FACT_CONFIG", json.dumps(CONFIGS[family]))
        mp.setattr(collector_mod, "teacher_forced_inputs", forward)
        mp.setattr(collector_mod.SampleCollector, "__call__", call)
        out = tmp_path_factory.mktemp(f"{family}_{modality}") / "heads.json"
        try:
            run_discovery(DiscoverySpec(model=FAMILIES[family][0], model_args="pretrained=x",
                                        tasks=[f"vrh_synth_fact_{modality}"], output=str(out), limit=N,
                                        gen_kwargs="max_new_tokens=3"), lm=models(family))
        finally:
            mp.undo()
        done[family, modality] = (out, inputs)
        return done[family, modality]

    return get


def text_positions(lm, ids: torch.Tensor, needle: str) -> list[int]:
    """The needle's own token run in the fed ids (it must occur exactly once)."""
    want = lm.tokenizer(needle, add_special_tokens=False)["input_ids"]
    row = ids.tolist()
    hits = [s for s in range(len(row) - len(want) + 1) if row[s:s + len(want)] == want]
    assert len(hits) == 1, f"{needle!r} occurs {len(hits)} times"
    return list(range(hits[0], hits[0] + len(want)))


def box_positions(image_run: list[int], grid_thw, size, box) -> list[int]:
    """Qwen2.5-VL's merged cells split the (squashed) picture evenly, row-major: those at least half inside the box,
    else the one holding its centre."""
    _, gh, gw = (int(v) for v in grid_thw)
    rows, cols = gh // 2, gw // 2
    assert len(image_run) == rows * cols
    cw, ch = size[0] / cols, size[1] / rows
    x1, y1, x2, y2 = box
    chosen = [image_run[r * cols + c] for r in range(rows) for c in range(cols)
              if max(0.0, min(x2, cw * (c + 1)) - max(x1, cw * c)) * max(0.0, min(y2, ch * (r + 1)) - max(y1, ch * r))
              >= 0.5 * cw * ch]
    return chosen or [image_run[int((y1 + y2) / 2 // ch) * cols + int((x1 + x2) / 2 // cw)]]


def expected_positions(family, lm, modality, doc, batch) -> tuple[list[int], list[int]]:
    """(evidence positions, media positions) of a doc, from the fed ids and the doc alone."""
    ids = batch["input_ids"][0]
    image = torch.nonzero(ids == lm.tokenizer.convert_tokens_to_ids(FAMILIES[family][1])).flatten().tolist()
    ev = doc["vrh_evidence"]
    if modality == "text":
        return text_positions(lm, ids, ev["text"]), image  # the grey picture is the media
    if modality == "image":
        return box_positions(image, batch["image_grid_thw"][0], doc["vrh_image_sizes"][0], ev["box"]), image
    run = torch.nonzero(ids == lm.processor.audio_token_id).flatten().tolist()
    t0, t1 = ev["seconds"]
    return [run[k] for k in range(len(run)) if 0.04 * k < t1 and 0.04 * (k + 1) > t0], run


@pytest.mark.parametrize("family, modality", CASES)
def test_evidence_mass_equals_eager_attention(models, discovered, family, modality):
    lm = models(family)
    out, inputs = discovered(family, modality)
    hf = load_heads_file(out)
    assert hf.scoring["evidence"] == ("image_box" if modality == "image" else modality)
    identity = json.loads((sidecars(out)["parts"] / "identity.json").read_text())
    assert identity["data"]["VRH_FACT_CONFIG"] == json.dumps(CONFIGS[family])  # part of the run's identity
    store = PartStore(sidecars(out)["parts"])
    keys = sorted(store.keys(), key=lambda k: int(k.rsplit("__", 1)[1]))
    assert len(keys) == N == len(inputs)
    masses = []
    for i, key in enumerate(keys):
        part, batch = store.read(key), inputs[i]
        doc = make_doc(modality, i, {**DEFAULTS, **CONFIGS[family]})
        evidence, media = expected_positions(family, lm, modality, doc, batch)
        assert part.meta["n_box_tokens"] == len(evidence) > 0
        if modality != "text":
            assert len(media) > len(evidence)
        else:  # the grey picture's tokens on Omni, none on Qwen2.5-VL
            assert (len(media) > 0) == (family == "qwen2_5_omni")
        assert part.meta["n_image_tokens"] == len(media)
        prompt_len, n = part.meta["prompt_len"], part.meta["n_answer"]
        assert n >= 1 and evidence[-1] < prompt_len
        attn = eager_attentions(lm.model, batch)[0].double()
        expect = answer_rows_mass(attn, prompt_len, n, evidence)
        np.testing.assert_allclose(part.stats["out_sum"], expect, atol=2e-5)
        np.testing.assert_allclose(part.stats[IMAGE_MASS], answer_rows_mass(attn, prompt_len, n, media),
                                   atol=2e-5)
        masses.append(expect)
    np.testing.assert_allclose(hf.scores, np.mean(masses, axis=0), atol=2e-5)


def test_compare_heads_runs_on_the_three_heads_files(discovered, tmp_path):
    from scipy.stats import hypergeom, spearmanr

    from vrh_lmms.cli import main

    files = [discovered("qwen2_5_omni", m)[0] for m in ("text", "image", "audio")]
    assert main(["compare-heads", *map(str, files), "--k", "3", "--output", str(tmp_path / "cmp")]) == 0
    data = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert len(data["pairs"]) == 3 and (tmp_path / "cmp" / "compare.md").exists()
    heads = {str(f): load_heads_file(f) for f in files}
    for pair, (a, b) in zip(data["pairs"], [(0, 1), (0, 2), (1, 2)]):
        ha, hb = heads[str(files[a])], heads[str(files[b])]
        top_a, top_b = {str(h) for h in ha.ranking[:3]}, {str(h) for h in hb.ranking[:3]}
        assert pair["overlap"] == len(top_a & top_b) and pair["population"] == ha.scores.size == 8
        assert pair["chance"] == pytest.approx(9 / 8)
        assert pair["p_value"] == pytest.approx(hypergeom.sf(pair["overlap"] - 1, 8, 3, 3))
        assert pair["spearman"] == pytest.approx(spearmanr(ha.scores.ravel(), hb.scores.ravel()).statistic)


def test_audio_heads_ablated_on_the_text_task_are_cross_ablation_rows(models, discovered, tmp_path):
    from vrh_lmms.base.heads.plan import plan_configurations
    from vrh_lmms.report import ReportSettings, build_report
    from vrh_lmms.runs.sweep.run import SweepSpec, run_sweep

    lm, task = models("qwen2_5_omni"), "vrh_synth_fact_text"
    mp = pytest.MonkeyPatch()
    mp.setenv("VRH_FACT_CONFIG", json.dumps(CONFIG))
    sweeps = []
    try:
        for source in ("text", "audio"):
            heads = discovered("qwen2_5_omni", source)[0]
            spec = SweepSpec("vrh_qwen25_omni", "pretrained=x", [task], str(heads),
                             plan_configurations([1], 0, False, ["zero"]), limit=N, gen_kwargs="max_new_tokens=3")
            sweeps.append(run_sweep(spec, tmp_path / f"sweep_{source}", lm=lm, progress=False))
    finally:
        mp.undo()
    moved = json.loads((sweeps[1] / "configs" / "top1" / "results.json").read_text())["vrh"]["ablation"]
    assert moved["heads_file"]["task"] == "vrh_synth_fact_audio" and moved["heads_file"]["evidence"] == "audio"
    assert build_report(sweeps, tmp_path / "report", ReportSettings(plots=False, n_resamples=200))
    text = (tmp_path / "report" / "report.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("|") and task in line]
    labels = {cell.strip() for line in rows for cell in line.split("|")}
    assert "top1@task:vrh_synth_fact_audio" in labels and "top1" in labels
    # the transfer table: the text task's own top1 beside the audio task's top1, ablated on the text task
    transfer = text.split("## Cross-model transfer of heads", 1)[1].split("\n## ", 1)[0]
    cells = [[c.strip() for c in line.split("|")[1:-1]] for line in transfer.splitlines() if task in line]
    assert [c[2:4] for c in cells] == [["top1", "task:vrh_synth_fact_audio"]]
