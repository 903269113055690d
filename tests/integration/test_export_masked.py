"""`vrh-lmms export-masked`: the exported checkpoint runs exactly as the in-memory ablated model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import HeadRef
from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file
from vrh_lmms.cli import main
from vrh_lmms.model.ablation import ablated
from vrh_lmms.model.backbone import locate_decoder
from vrh_lmms.model.export import MASKED_FILE, export_masked
from vrh_lmms.model.tiny.inputs import load_tiny, processor_inputs

torch.set_num_threads(1)


def _logits(model, batch):
    with torch.no_grad():
        return model(**batch).logits


@pytest.fixture(scope="module")
def exported(tiny_qwen25, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "masked"
    assert main(["export-masked", "--pretrained", str(tiny_qwen25), "--heads", "L0H1;L1H0",
                 "--output", str(out)]) == 0
    return out


def test_exported_logits_equal_in_memory_ablation(tiny_qwen25, exported):
    model, processor = load_tiny(tiny_qwen25)
    masked, masked_processor = load_tiny(exported)
    batch = processor_inputs(processor, n=2)
    batch_from_export = processor_inputs(masked_processor, n=2)
    assert batch.keys() == batch_from_export.keys()
    assert all(torch.equal(batch[k], batch_from_export[k]) for k in batch)  # processor/tokenizer copied intact
    base = _logits(model, batch)
    with ablated(model, [HeadRef(0, 1), HeadRef(1, 0)], method="fold"):
        expected = _logits(model, batch)
    got = _logits(masked, batch)
    assert not torch.equal(got, base)
    assert torch.equal(got, expected)


def test_only_the_folded_columns_change(tiny_qwen25, exported):
    model, _ = load_tiny(tiny_qwen25)
    masked, _ = load_tiny(exported)
    original, changed = dict(model.named_parameters()), dict(masked.named_parameters())
    assert original.keys() == changed.keys()
    dec = locate_decoder(masked)
    d = dec.geometry.head_dim
    proj_names = {n for n, p in masked.named_parameters() if any(p is q.weight for q in dec.out_projs)}
    for name, p in changed.items():
        if name not in proj_names:
            assert torch.equal(p, original[name]), name
    w0 = dec.out_projs[0].weight
    assert torch.count_nonzero(w0[:, d:2 * d]) == 0 and torch.count_nonzero(w0[:, :d]) > 0


def test_masked_json_records_the_heads(tiny_qwen25, exported):
    meta = json.loads((exported / MASKED_FILE).read_text())
    assert meta["schema"] == "vrh-masked/1" and meta["source"] == str(tiny_qwen25)
    vrh = meta["vrh"]
    assert vrh["family"] == "qwen2_5_vl" and vrh["ablation"]["heads"] == ["L0H1", "L1H0"]
    assert vrh["ablation"]["mode"] == "zero" and vrh["ablation"]["method"] == "fold"
    assert vrh["geometry"] == {"layers": 2, "heads": 4, "kv_heads": 2, "head_dim": 16}
    assert {"tokenizer.json", "chat_template.jinja"} <= set(meta["copied_files"])


def test_force_replaces_only_an_earlier_export(tiny_qwen25, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    args = ["export-masked", "--pretrained", str(tiny_qwen25), "--heads", "L0H0", "--output", str(out)]
    for extra in ([], ["--force"]):  # a folder holding a file we did not write is refused, --force or not
        assert main(args + extra) == 2
        err = capsys.readouterr().err
        assert "keep.txt" in err and "did not write" in err and "--force" not in err
        assert (out / "keep.txt").read_text() == "x" and not (out / MASKED_FILE).exists()
    (out / "keep.txt").unlink()
    assert main(args) == 0
    first = json.loads((out / MASKED_FILE).read_text())
    assert main(args) == 2 and "pass --force" in capsys.readouterr().err  # our own export: --force would help
    assert main(args[:-4] + ["--heads", "L1H1", "--output", str(out), "--force"]) == 0
    assert json.loads((out / MASKED_FILE).read_text())["vrh"]["ablation"]["heads"] == ["L1H1"] != \
        first["vrh"]["ablation"]["heads"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.") and p.is_dir()]  # no staging folder left


def test_refuses_to_overwrite_the_source(tiny_qwen25):
    with pytest.raises(VRHError, match="would replace the source checkpoint"):
        export_masked(str(tiny_qwen25), "L0H0", tiny_qwen25, force=True)


def test_top_k_from_heads_file(tiny_qwen25, tmp_path):
    model, _ = load_tiny(tiny_qwen25)
    geometry = locate_decoder(model).geometry
    scores = np.arange(geometry.total_heads, dtype=float).reshape(geometry.layers, geometry.heads)
    hf = HeadsFile(model={"id": "tiny", "family": "qwen2_5_vl"}, geometry=geometry, scores=scores,
                   ranking=ranking_from_scores(scores), scoring={"query": "out", "key": "sum", "aggregate": "mean"})
    save_heads_file(hf, tmp_path / "heads.json")
    result = export_masked(str(tiny_qwen25), "top2", tmp_path / "out", heads_file=str(tmp_path / "heads.json"))
    assert result.record["ablation"]["heads"] == ["L1H2", "L1H3"]
    assert result.record["config"]["kind"] == "topk"
    assert result.record["ablation"]["heads_file"]["sha256"]


def test_bad_requests_are_named(tiny_qwen25, tmp_path):
    with pytest.raises(VRHError, match="selects no heads"):
        export_masked(str(tiny_qwen25), "none", tmp_path / "a")
    with pytest.raises(VRHError, match="L0H99"):
        export_masked(str(tiny_qwen25), "L0H99", tmp_path / "b")
    with pytest.raises(VRHError, match="o_proj does not have"):
        export_masked(str(tiny_qwen25), "L0H0", tmp_path / "c", ablation="mean")
    assert not any((tmp_path / n).exists() for n in "abc")


def test_remote_code_family_needs_the_flag(tmp_path):
    src = tmp_path / "internvl"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"model_type": "internvl_chat", "architectures": ["X"]}))
    with pytest.raises(VRHError, match="--trust-remote-code"):
        export_masked(str(src), "L0H0", tmp_path / "out")
