"""Heads without a heads file: the per-user registry `vrh-lmms discover` fills, and the paper's published lists."""

from __future__ import annotations

import json

import pytest

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import Geometry, HeadRef, paper, parse_head, registry, resolve_spec

QWEN25_7B = Geometry(layers=28, heads=28, kv_heads=4, head_dim=128)
QWEN3_8B = Geometry(layers=36, heads=32, kv_heads=8, head_dim=128)


def test_the_shipped_table_is_the_reference_transcription():
    from pathlib import Path

    shared = Path(__file__).resolve().parents[3] / "shared" / "reference" / "paper_heads.json"
    if shared.is_file():
        assert paper.published() == json.loads(shared.read_text())
    for bench, models in paper.published()["heads"].items():
        for model, heads in models.items():
            assert len(heads) == len(set(heads)) == 20, (bench, model)


@pytest.mark.parametrize("pretrained,family,geometry,model", [
    ("Qwen/Qwen2.5-VL-7B-Instruct", "qwen2_5_vl", QWEN25_7B, "Qwen2.5-VL-7B"),
    ("/ckpts/my-copy", "qwen2_5_vl", QWEN25_7B, "Qwen2.5-VL-7B"),  # by family and geometry
    ("/ckpts/my-copy", "internvl", QWEN25_7B, "InternVL3-8B"),  # same 28 x 28, other family
    ("/ckpts/my-copy", "qwen3_vl", QWEN3_8B, "Qwen3-VL-8B"),
    ("/ckpts/my-copy", "internvl_chat", QWEN3_8B, "InternVL3.5-8B"),
])
def test_a_checkpoint_is_matched_by_hub_id_or_by_family_and_geometry(pretrained, family, geometry, model):
    assert paper.match_model(pretrained, family, geometry) == model


def test_paper_top20_is_exactly_the_published_table():
    for bench in paper.benchmarks():
        hf = paper.paper_heads_file("Qwen/Qwen2.5-VL-7B-Instruct", "qwen2_5_vl", QWEN25_7B, f"paper:{bench}")
        table = [parse_head(h) for h in paper.published()["heads"][bench]["Qwen2.5-VL-7B"]]
        assert hf.ranking[:20] == table and hf.source == f"paper:{bench}"
        top = resolve_spec("top20", QWEN25_7B, heads_file=hf)
        assert set(top.heads) == set(table) and top.heads_file["source"] == f"paper:{bench}"
    with pytest.raises(VRHError, match="no published head list fits it .*2 layers x 4 heads"):
        paper.paper_heads_file("/x", "qwen2_5_vl", Geometry(2, 4, 2, 16))
    with pytest.raises(VRHError, match="heads_source='paper:vqa'"):
        paper.benchmark_of("paper:vqa")


def test_the_registry_finds_the_heads_discovery_registered(tmp_path, monkeypatch):
    monkeypatch.setenv(registry.ENV, str(tmp_path / "registry.json"))
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text('{"a": 1}')
    heads = tmp_path / "h.json"
    heads.write_text("{}")
    with pytest.raises(VRHError, match="no heads file is registered for .*ckpt"):
        registry.lookup(str(ckpt))
    registry.register(str(ckpt), ["vrh_refcoco_val"], heads)
    assert registry.lookup(str(ckpt)) == heads.resolve() == registry.lookup(str(ckpt) + "/", "vrh_refcoco_val")
    other = tmp_path / "h2.json"
    other.write_text("{}")
    registry.register(str(ckpt), ["vrh_refcocog_val"], other)
    with pytest.raises(VRHError, match="several tasks .*heads_task=TASK"):
        registry.lookup(str(ckpt))
    assert registry.lookup(str(ckpt), "vrh_refcocog_val") == other.resolve()
    registry.register(str(ckpt), ["vrh_refcocog_val"], heads)  # a later discovery of the same task replaces it
    assert registry.lookup(str(ckpt), "vrh_refcocog_val") == heads.resolve()
    (ckpt / "config.json").write_text('{"a": 2}')  # another model in the same folder
    with pytest.raises(VRHError, match="another config.json"):
        registry.lookup(str(ckpt), "vrh_refcocog_val")
    assert HeadRef(0, 0) in QWEN25_7B.all_heads()
