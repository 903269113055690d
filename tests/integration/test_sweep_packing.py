"""Packed sweeps write what unpacked sweeps write: on tiny models of three families through lmms-eval's evaluator
(float32, CPU), every configuration folder of `--pack 3` (a packed sweep resuming a folder an unpacked sweep
started) equals the unpacked sweep's: metrics, vrh block and every sample line, raw answers included."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from support.packed_sweeps import counting_packs

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import Geometry
from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file
from vrh_lmms.base.heads.plan import plan_configurations
from vrh_lmms.harness import lmms
from vrh_lmms.model.ablation import means_path_for, save_means
from vrh_lmms.runs.sweep.packs import pack_groups, parse_pack
from vrh_lmms.runs.sweep.run import SweepSpec, choose_pack, kv_bytes_per_token, run_sweep

TASK = "vrh_synth_grounding"
QWEN_PIXELS = 28 * 28 * 16
# family -> (model, extra model args, batch size): an lmms-eval chat backend with left-padded batches, one that
# generates a sample at a time (llava_hf), and our own backend. The model-level tests cover all seven families.
FAMILIES = {
    "qwen2_5_vl": ("vrh_qwen25", f",min_pixels={QWEN_PIXELS},max_pixels={QWEN_PIXELS}", 2),
    "llava_next": ("vrh_llava_next", "", 1),
    "paligemma": ("vrh_paligemma", "", 2),
}
KEEP = ("baseline", "top2", "random2_s0", "top2_mean", "layer_matched2_s0_mean")


def sweep_files(out: Path) -> dict[str, tuple]:
    """Everything a reader takes from a sweep folder, per configuration (lmms-eval's timings left out)."""
    contents = {}
    for folder in sorted((out / "configs").iterdir()):
        results = json.loads((folder / "results.json").read_text())
        lines = [json.loads(line) for line in (folder / f"samples_{TASK}.jsonl").read_text().splitlines()]
        contents[folder.name] = (results["results"], results["vrh"], results.get("n-samples"), lines)
    return contents


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_packed_sweep_writes_the_unpacked_files(family, tiny_or_skip, vrh_env, tmp_path):
    model_name, extra, batch_size = FAMILIES[family]
    ckpt = tiny_or_skip(family)
    vrh_env.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 4, "seed": 3}))
    model_args = f"pretrained={ckpt},dtype=float32{extra}"
    lm = lmms.build_model(model_name, model_args, batch_size=batch_size)
    g = lm.vrh_decoder.geometry
    scores = np.random.default_rng(2).random((g.layers, g.heads))
    heads = tmp_path / "heads.json"
    save_heads_file(HeadsFile({"id": str(ckpt), "family": family}, g, scores, ranking_from_scores(scores)), heads)
    means = torch.randn(g.layers, g.heads, g.head_dim, generator=torch.Generator().manual_seed(1))
    save_means(means, means_path_for(heads), g, 100)
    configs = [c for c in plan_configurations([2], 1, True, ["zero", "mean"]) if c.id in KEEP]
    assert len(configs) == len(KEEP)

    def spec(pack: int) -> SweepSpec:
        return SweepSpec(model_name, model_args, [TASK], str(heads), configs, limit=4, batch_size=batch_size,
                         gen_kwargs="max_new_tokens=10", pack=pack)

    unpacked, packed = tmp_path / "unpacked", tmp_path / "packed"
    run_sweep(spec(1), unpacked, lm=lm, progress=False)
    # The packed sweep resumes a folder the unpacked one started (one configuration done), as a rerun would.
    packed.mkdir()
    shutil.copy(unpacked / "sweep.json", packed / "sweep.json")
    shutil.copytree(unpacked / "configs" / "top2", packed / "configs" / "top2")
    with counting_packs(lm) as calls:
        run_sweep(spec(3), packed, lm=lm, progress=False)
    assert calls["packs"] == 2, "four configurations to do, in packs of at most three: 2 + 2"
    manifest = json.loads((packed / "sweep.json").read_text())
    assert manifest["pack"] == 3 and all(c["status"] == "done" for c in manifest["configurations"])
    a, b = sweep_files(unpacked), sweep_files(packed)
    assert sorted(a) == sorted(b) == sorted(c.id for c in configs)
    for cid in a:
        assert a[cid] == b[cid], cid
    raws = {cid: [line["vrh_record"]["raw"] for line in a[cid][3]] for cid in a}
    assert len({tuple(r) for r in raws.values()}) > 1, "the head sets must change some answers"
    assert lm.vrh_record()["ablation"]["mode"] == "none"


def test_pack_groups_and_flags():
    configs = plan_configurations([1, 2, 3], 3, True, ["zero"])  # 22
    sizes = [len(g) for g in pack_groups(configs, 16)]
    assert sizes == [11, 11] and [c for g in pack_groups(configs, 16) for c in g] == configs
    assert [len(g) for g in pack_groups(configs, 1)] == [1] * 22 and pack_groups([], 4) == []
    assert [len(g) for g in pack_groups(configs, 5)] == [5, 5, 4, 4, 4]
    assert parse_pack("auto") is None and parse_pack(None) is None and parse_pack("8") == 8
    for bad in ("0", "-2", "x"):
        with pytest.raises(VRHError, match="--pack"):
            parse_pack(bad)


class _FakeLM:
    def __init__(self, reason, device="cpu"):
        self.reason = reason
        self.model = torch.nn.Linear(1, 1).to(device)

    def vrh_pack_unsupported(self):
        return self.reason


def test_choose_pack():
    cpu = _FakeLM(None)
    assert choose_pack(None, cpu, 22, 1) == 22 and choose_pack(None, cpu, 200, 1) == 100  # CPU: 100 batch rows
    assert choose_pack(None, cpu, 22, 25) == 4 and choose_pack(None, cpu, 22, 101) == 1
    assert choose_pack(None, _FakeLM("remote code"), 22, 1) == 1
    assert choose_pack(5, cpu, 22, 1) == 5 and choose_pack(1, _FakeLM("remote code"), 22, 1) == 1
    with pytest.raises(VRHError, match="--pack 4: remote code"):
        choose_pack(4, _FakeLM("remote code"), 22, 1)
    # Qwen2.5-VL-7B in bf16: 28 layers x 2 x 4 KV heads x 128 x 2 bytes = 57,344 bytes per token and row.
    assert kv_bytes_per_token(Geometry(28, 28, 4, 128), torch.bfloat16) == 57344


UNIFORM_KEEP = ("baseline", "top2", "random2_s0", "top2_uniform", "random2_s0_uniform", "top2_uniform_image")


def test_uniform_configurations_run_alone_in_a_packed_sweep(tiny_or_skip, vrh_env, tmp_path, capsys):
    """Uniform-attention ablation edits attention, not o_proj rows, so a pack's per-row masks cannot carry it:
    with --pack 4 the zero configurations share one pack, each uniform one runs alone (and the sweep says so), and
    every file equals the unpacked sweep's. Packing them as rows would give them zero ablation's answers."""
    from vrh_lmms.base.heads import HeadRef
    from vrh_lmms.model.ablation import RowAblator, RowConfig

    model_name, extra, batch_size = FAMILIES["qwen2_5_vl"]
    ckpt = tiny_or_skip("qwen2_5_vl")
    vrh_env.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 4, "seed": 3}))
    model_args = f"pretrained={ckpt},dtype=float32{extra}"
    lm = lmms.build_model(model_name, model_args, batch_size=batch_size)
    g = lm.vrh_decoder.geometry
    with pytest.raises(VRHError, match="'uniform' edits attention, not o_proj, so it cannot share a packed batch"):
        RowAblator(lm.vrh_decoder, [RowConfig(()), RowConfig((HeadRef(0, 1),), "uniform")])
    scores = np.random.default_rng(2).random((g.layers, g.heads))
    heads = tmp_path / "heads.json"
    save_heads_file(HeadsFile({"id": str(ckpt), "family": "qwen2_5_vl"}, g, scores, ranking_from_scores(scores)), heads)
    configs = [c for c in plan_configurations([2], 1, False, ["zero", "uniform", "uniform_image"])
               if c.id in UNIFORM_KEEP]
    assert [c.id for c in configs] == list(UNIFORM_KEEP)
    assert [[c.id for c in grp] for grp in pack_groups(configs, 4)] == [
        ["baseline", "top2", "random2_s0"], ["top2_uniform"], ["random2_s0_uniform"], ["top2_uniform_image"]]

    def spec(pack: int) -> SweepSpec:
        return SweepSpec(model_name, model_args, [TASK], str(heads), configs, limit=4, batch_size=batch_size,
                         gen_kwargs="max_new_tokens=10", pack=pack)

    unpacked, packed = tmp_path / "unpacked", tmp_path / "packed"
    run_sweep(spec(1), unpacked, lm=lm, progress=False)
    capsys.readouterr()
    packs = []
    original_pack = lm.vrh_pack

    def counting_pack(headsets, modes, **kwargs):
        packs.append(list(modes))
        return original_pack(headsets, modes, **kwargs)

    lm.vrh_pack = counting_pack
    run_sweep(spec(4), packed, lm=lm, progress=False)
    del lm.vrh_pack
    assert packs == [["none", "zero", "zero"]], "only the zero configurations share a pack"
    note = capsys.readouterr().err
    assert "top2_uniform, random2_s0_uniform, top2_uniform_image run unpacked" in note and "attention" in note
    a, b = sweep_files(unpacked), sweep_files(packed)
    assert sorted(a) == sorted(b) == sorted(UNIFORM_KEEP)
    for cid in a:
        assert a[cid] == b[cid], cid
    assert b["top2_uniform"][1]["ablation"]["mode"] == "uniform" and b["top2_uniform"][1]["ablation"]["method"] == \
        "attention"
    raws = {cid: [line["vrh_record"]["raw"] for line in a[cid][3]] for cid in a}
    assert raws["top2_uniform"] != raws["top2"] or raws["top2_uniform_image"] != raws["top2"], \
        "uniform ablation must answer differently from zero ablation somewhere, or this test could not fail"
