"""`vrh_hf`: any image-text-to-text checkpoint through lmms-eval's generic `huggingface` chat backend, with heads.

End to end on a tiny Gemma 3 (no dedicated vrh wrapper): `lmms-eval --model vrh_hf ... heads=L0H1` answers as our
own masked checkpoint does (o_proj columns of L0H1 zeroed by hand here and saved, then run with no heads), which
the backend alone cannot even load on transformers 5. A checkpoint whose heads cannot be cut is refused in one
line before any weight loads.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import offline_env
from support.packed_sweeps import unpacked_and_packed

from vrh_lmms.base.errors import VRHError

TASK = "vrh_synth_grounding"
LMMS_EVAL = str(Path(sys.executable).with_name("lmms-eval"))


@pytest.fixture(scope="module")
def tiny_gemma3(tmp_path_factory):
    from support.tiny_gemma3 import build

    return build(tmp_path_factory.mktemp("tiny_gemma3"), seed=0)


@pytest.fixture(scope="module")
def masked_gemma3(tiny_gemma3, tmp_path_factory):
    """Our own masked checkpoint: L0H1's o_proj input columns zeroed in the saved weights (head_dim 16)."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    out = tmp_path_factory.mktemp("masked_gemma3")
    model = AutoModelForImageTextToText.from_pretrained(tiny_gemma3, dtype=torch.float32)
    with torch.no_grad():
        model.model.language_model.layers[0].self_attn.o_proj.weight[:, 16:32] = 0
    model.save_pretrained(out)
    AutoProcessor.from_pretrained(tiny_gemma3).save_pretrained(out)
    return out


def _build(pretrained, **args):
    from vrh_lmms.harness.lmms import build_model

    text = ",".join(f"{k}={v}" for k, v in {"pretrained": pretrained, "dtype": "float32", **args}.items())
    return build_model("vrh_hf", text)


def test_vrh_hf_finds_gemma3_heads_and_ablates_them_exactly(tiny_gemma3, masked_gemma3):
    lm = _build(tiny_gemma3, heads="L0H1")
    g = lm.vrh_decoder.geometry
    assert (g.layers, g.heads, g.kv_heads, g.head_dim) == (6, 4, 2, 16)
    assert type(lm.model).__name__ == "Gemma3ForConditionalGeneration"  # not the bare AutoModel
    assert lm.vrh_record()["ablation"]["heads"] == ["L0H1"]
    masked = _build(masked_gemma3)
    ids = torch.tensor([[2, 3, 40, 41, 42, 43, 44, 45, 9, 4]])
    with torch.no_grad():
        ours, theirs = lm.model(input_ids=ids).logits, masked.model(input_ids=ids).logits
        lm.vrh_apply(_none(lm))
        intact = lm.model(input_ids=ids).logits
    assert torch.equal(ours, theirs)
    assert not torch.equal(ours, intact)


def test_vrh_load_takes_a_checkpoint_without_a_family_record(tiny_gemma3, masked_gemma3, tmp_path):
    from transformers import AutoConfig

    import vrh_lmms as vrh
    from vrh_lmms.api import _model_name

    AutoConfig.for_model("aria").save_pretrained(tmp_path)  # a type no family record claims
    assert _model_name(str(tmp_path)) == "vrh_hf"
    model = vrh.load(str(tiny_gemma3), model="vrh_hf", dtype="float32")
    assert model.geometry.layers == 6
    masked = vrh.load(str(masked_gemma3), model="vrh_hf", dtype="float32")
    ids = torch.tensor([[2, 3, 40, 41, 42, 43, 44, 45, 9, 4]])
    with torch.no_grad():
        intact = model.hf(input_ids=ids).logits
        with vrh.ablate(model, ["L0H1"]):
            ablated = model.hf(input_ids=ids).logits
        assert torch.equal(ablated, masked.hf(input_ids=ids).logits)
        assert torch.equal(model.hf(input_ids=ids).logits, intact) and not torch.equal(ablated, intact)


def _none(lm):
    from vrh_lmms.base.heads.spec import resolve_spec

    return resolve_spec(None, lm.vrh_decoder.geometry)


def test_head_in_a_hybrid_decoders_linear_layer_is_refused_in_one_line_before_any_weight_loads(tmp_path):
    from transformers import AutoConfig

    AutoConfig.for_model("qwen3_5").save_pretrained(tmp_path)  # config.json only: no weights to load
    with pytest.raises(VRHError) as err:
        _build(tmp_path, heads="L3H0;L2H1")  # L3 has heads (full attention), L2 is a Gated-DeltaNet layer
    line = str(err.value)
    assert "\n" not in line and "L2H1" in line and "layer without attention heads" in line
    assert "heads exist in L3, L7, L11" in line


def test_image_read_through_cross_attention_is_refused_in_one_line_before_any_weight_loads(tmp_path):
    from transformers import AutoConfig

    AutoConfig.for_model("mllama").save_pretrained(tmp_path)
    with pytest.raises(VRHError) as err:
        _build(tmp_path, heads="L0H0")
    line = str(err.value)
    assert "\n" not in line and "cross-attention layers (L3, L8" in line and "mllama" in line


def _tasks_path() -> str:
    from vrh_lmms.base.paths import tasks_path

    return str(tasks_path())


def _answers(model_args: str, out: Path, tmp_path: Path) -> tuple[list[str], dict]:
    cmd = [LMMS_EVAL, "--model", "vrh_hf", "--model_args", model_args, "--tasks", TASK, "--include_path",
           _tasks_path(), "--limit", "4", "--output_path", str(out), "--log_samples"]
    env = offline_env(VRH_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, cwd=tmp_path, check=False)
    results = list(out.rglob("*_results.json"))
    assert proc.returncode == 0 and len(results) == 1, proc.stderr[-3000:]
    samples = list(out.rglob(f"*_samples_{TASK}.jsonl"))
    rows = sorted((json.loads(line) for line in samples[0].read_text().splitlines()), key=lambda r: r["doc_id"])
    assert rows and all("filtered_resps" in r for r in rows), sorted(rows[0]) if rows else proc.stderr[-3000:]
    return [json.dumps(r["filtered_resps"]) for r in rows], json.loads(results[0].read_text())


@pytest.mark.slow
def test_lmms_eval_vrh_hf_answers_like_our_masked_checkpoint(tiny_gemma3, masked_gemma3, tmp_path):
    ours, data = _answers(f"pretrained={tiny_gemma3},heads=L0H1,dtype=float32", tmp_path / "ours", tmp_path)
    theirs, _ = _answers(f"pretrained={masked_gemma3},dtype=float32", tmp_path / "masked", tmp_path)
    assert len(ours) == 4 and ours == theirs
    assert any(json.loads(a) not in ([""], [[""]], []) for a in ours), ours  # real answers, not empty strings
    assert data["vrh"]["family"] == "hf" and data["vrh"]["ablation"]["heads"] == ["L0H1"]


@pytest.mark.slow
def test_packed_sweep_through_vrh_hf_writes_the_unpacked_files(tiny_gemma3, vrh_env, tmp_path):
    """Sweeps run on a model without a family record, packed (with the shared prefill) as one at a time."""
    import numpy as np

    from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file
    from vrh_lmms.base.heads.plan import plan_configurations

    vrh_env.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 4, "seed": 3}))
    model_args = f"pretrained={tiny_gemma3},dtype=float32"
    lm = _build(tiny_gemma3)
    assert lm.vrh_pack_unsupported() is None
    g = lm.vrh_decoder.geometry
    scores = np.random.default_rng(2).random((g.layers, g.heads))
    heads = tmp_path / "heads.json"
    save_heads_file(HeadsFile({"id": str(tiny_gemma3), "family": "hf"}, g, scores, ranking_from_scores(scores)),
                    heads)
    configs = [c for c in plan_configurations([2], 1, False, ["zero"]) if c.id in ("baseline", "top2",
                                                                                      "random2_s0")]

    one, packed, packs = unpacked_and_packed(lm, "vrh_hf", model_args, TASK, heads, configs, tmp_path, limit=4,
                                             max_new_tokens=8)
    assert packs == 1, "three configurations in one pack"
    assert len({json.dumps(v[2]) for v in one.values()}) > 1, "the head sets must change some answers"
    assert sorted(one) == sorted(packed) == sorted(c.id for c in configs)
    for cid in one:
        assert one[cid] == packed[cid], cid
