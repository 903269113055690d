"""The ranker's data: the synthetic multi-image set has exactly one candidate holding each query's object, and the
MMDocIR loader reads a fixture in the published schema."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.synth.scenes import generate_scene
from vrh_lmms.runs.rank.data import load_mmdocir, parse_data, synth_set

FIXTURE = Path(__file__).parents[1] / "fixtures" / "mmdocir"


def test_synth_queries_name_an_object_of_exactly_one_candidate():
    data = synth_set(30, 4, seed=2, start=100)
    assert len(data.queries) == 30
    for q in data.queries:
        group = int(q.set_id[1:])
        scenes = [generate_scene(100 + group * 4 + j, 2) for j in range(4)]
        holders = [j for j, s in enumerate(scenes) if any(f"the {o.colour} {o.shape}" == q.text for o in s.objects)]
        assert holders == q.gold
    assert len({q.gold[0] for q in data.queries}) == 4, "every position holds gold candidates"
    assert synth_set(30, 4, seed=2, start=100).queries[5].text == data.queries[5].text  # seeded


def test_mmdocir_fixture_loads_in_the_published_schema():
    data = load_mmdocir(FIXTURE)
    assert [q.gold for q in data.queries] == [[1], [2], [0, 2], [1]]
    assert {q.set_id for q in data.queries} == set(data.sets)
    doc = data.sets[data.queries[0].set_id]
    assert len(doc.images) == 3
    table = pq.read_table(FIXTURE / "MMDocIR_pages.parquet").to_pylist()
    own = [r for r in table if r["doc_name"] == doc.set_id]
    for page, row in zip(doc.images, own):  # each candidate is that document's page, in page order
        want = np.asarray(Image.open(io.BytesIO(row["image_binary"])).convert("RGB"))
        np.testing.assert_array_equal(np.asarray(page), want)
    assert len(load_mmdocir(FIXTURE, limit=2).queries) == 2
    skipped = load_mmdocir(FIXTURE, max_pages=3)
    assert len(skipped.queries) == 3 and skipped.notes


def test_bad_data_is_one_line_error(tmp_path):
    with pytest.raises(VRHError, match="MMDocIR_annotations.jsonl"):
        load_mmdocir(tmp_path)
    with pytest.raises(VRHError, match="--data"):
        parse_data("mmdocir")
    assert parse_data("mmdocir:/x") == ("mmdocir", "/x")


def test_pages_are_read_by_row_group_the_same(tmp_path):
    """The published parquet is large; pages are read per document from the row groups holding them."""
    import shutil

    shutil.copy(FIXTURE / "MMDocIR_annotations.jsonl", tmp_path)
    pq.write_table(pq.read_table(FIXTURE / "MMDocIR_pages.parquet"), tmp_path / "MMDocIR_pages.parquet",
                   row_group_size=2)
    assert pq.ParquetFile(tmp_path / "MMDocIR_pages.parquet").metadata.num_row_groups > 3
    whole, split = load_mmdocir(FIXTURE), load_mmdocir(tmp_path)
    for name, doc in whole.sets.items():
        for a, b in zip(doc.images, split.sets[name].images, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
