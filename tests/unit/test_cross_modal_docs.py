"""The same fact in three modalities (tasks/common/cross_modal.py): doc i of a seed states one count in text, in a
picture and in a clip; the count is where each doc's evidence says; docs are pure functions of (seed, i)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vrh_lmms.base.data_env import DATA_VARIABLES
from vrh_lmms.tasks.common import cross_modal as X
from vrh_lmms.tasks.common.audio_needle import render
from vrh_lmms.tasks.common.sources import SourceError

CFG = {**X.DEFAULTS, "n": 12, "seed": 4}


@pytest.mark.parametrize("i", range(12))
def test_the_three_docs_of_one_id_state_the_same_count(i):
    docs = {m: X.make_doc(m, i, CFG) for m in X.MODALITIES}
    f = X.fact(i, CFG)
    assert {d["vrh_target"] for d in docs.values()} == {str(f["count"])}
    assert {d["vrh_fact"] for d in docs.values()} == {json.dumps(f, sort_keys=True)}
    assert len({d["question_id"] for d in docs.values()}) == 1
    # text: the needle sentence states the count of the asked object, once
    text = docs["text"]
    ev = text["vrh_evidence"]
    assert text["vrh_prompt"].count(ev["text"]) == 1 and text["vrh_prompt"][ev["start"]:].startswith(ev["text"])
    assert ev["text"].split()[2] == str(f["count"]) and f"{f['colour']} {f['shape']} object" in ev["text"]
    assert text["vrh_prompt"].count(f" {f['colour']} {f['shape']} object") == 2  # the fact and the question
    # image: exactly `count` copies of the object, all inside the evidence box
    plan = json.loads(docs["image"]["vrh_image_plan"])
    copies = [b for s, c, b in plan["objects"] if (c, s) == (f["colour"], f["shape"])]
    assert len(copies) == f["count"]
    x1, y1, x2, y2 = docs["image"]["vrh_evidence"]["box"]
    assert all(x1 <= b[0] and y1 <= b[1] and b[0] + b[2] <= x2 and b[1] + b[3] <= y2 for b in copies)
    assert any(b[0] == x1 for b in copies) and any(b[1] + b[3] == y2 for b in copies)  # the tightest such box
    # audio: `count` beeps, spanning the evidence seconds
    aplan = json.loads(docs["audio"]["vrh_audio_plan"])
    assert aplan["beeps"] == f["count"]
    t0, t1 = docs["audio"]["vrh_evidence"]["seconds"]
    assert t1 - t0 == pytest.approx(f["count"] * 0.16 - 0.08, abs=2e-3)


def test_docs_are_pure_functions_of_seed_and_index():
    for m in X.MODALITIES:
        assert X.make_doc(m, 3, CFG) == X.make_doc(m, 3, CFG)
    counts = [X.fact(i, CFG)["count"] for i in range(40)]
    assert set(counts) == {1, 2, 3, 4, 5}  # the whole range occurs
    assert counts != [X.fact(i, {**CFG, "seed": 5})["count"] for i in range(40)]


def test_the_picture_draws_the_copies_in_the_asked_colour():
    from vrh_lmms.base.synth.scenes import COLOURS

    doc = X.image_doc(2, CFG)
    image = X.doc_to_visual(doc)[0]
    assert image.size == (224, 224) and doc["vrh_image_sizes"] == [[224, 224]]
    f = json.loads(doc["vrh_fact"])
    pixels = np.asarray(image).reshape(-1, 3)
    assert (pixels == np.array(COLOURS[f["colour"]])).all(axis=1).any()
    wav = X.doc_to_visual(X.audio_doc(2, CFG))[0]
    assert wav["sampling_rate"] == 16000 and wav["array"].size == 6 * 16000
    assert np.array_equal(wav["array"], render(json.loads(X.audio_doc(2, CFG)["vrh_audio_plan"])))
    assert X.doc_to_visual(X.text_doc(2, CFG)) == []
    grey = X.doc_to_visual(X.text_doc(2, {**CFG, "text_image": 56}))
    assert len(grey) == 1 and grey[0].size == (56, 56)


def test_scoring_reads_the_first_integer_into_a_vqa_record():
    doc = X.text_doc(0, CFG)
    right = X.process_results(doc, [f"{doc['vrh_target']} ."])
    assert right["acc"] == 1.0 and right["vrh_record"]["kind"] == "vqa"
    assert right["vrh_record"]["question_type"] == "fact_text"
    assert right["vrh_record"]["fact_count"] == int(doc["vrh_target"])
    wrong = X.process_results(doc, ["9"])
    assert wrong["acc"] == 0.0 and wrong["vrh_record"]["status"] == "wrong"
    assert X.process_results(doc, ["none"])["parse_failure"] == 1.0


def test_config_is_a_data_variable_and_is_checked(monkeypatch):
    assert "VRH_FACT_CONFIG" in DATA_VARIABLES
    monkeypatch.setenv("VRH_FACT_CONFIG", '{"n": 2, "colour": "red"}')
    with pytest.raises(SourceError, match=r"^VRH_FACT_CONFIG: unknown key\(s\) colour; known: n, seed"):
        X.fact_config()
    monkeypatch.setenv("VRH_FACT_CONFIG", '{"seconds": 1.0}')
    with pytest.raises(SourceError, match=r"seconds >= 1\.20"):
        X.fact_config()
    monkeypatch.setenv("VRH_FACT_CONFIG", '{"n": 2, "seed": 7}')
    assert X.fact_config()["seed"] == 7
