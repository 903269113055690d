"""VQA tasks: answer extraction, per-benchmark docs from local files in each hub schema, VAW and SpatialRGPT
local layouts, and the vqa records process_results emits."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vrh_lmms.tasks.common import answers as A
from vrh_lmms.tasks.common import vqa as V
from vrh_lmms.tasks.common import vqa_data as VD
from vrh_lmms.tasks.common.sources import SourceError

REAL = Path(__file__).parents[1] / "fixtures" / "real_excerpts"

def _img(color=(90, 90, 90), size=(64, 48)):
    return Image.new("RGB", size, color)


def _write(tmp_path, split, rows, image_cols=("image",)):
    import datasets

    ds = datasets.Dataset.from_list(rows)
    for c in image_cols:
        ds = ds.cast_column(c, datasets.Image())
    path = tmp_path / f"{split}.parquet"
    ds.to_parquet(str(path))
    return tmp_path


def _docs(vrh_env, placeholder, task, key, folder):
    vrh_env.setenv(f"VRH_{key}_DATA", str(folder))
    return getattr(VD, task)(placeholder())


def _check_record(out, *, correct, status):
    rec = out["vrh_record"]
    assert rec["kind"] == "vqa" and rec["status"] == status and rec["correct"] is correct
    assert out["acc"]["score"] == float(correct) and out["parse_failure"]["score"] == float(status == "parse_failure")
    # each metric carries its image (lmms-eval's clustered SE, cluster_key); `score` is what --baseline pairs on
    assert out["acc"]["image_id"] == rec["image_id"] and out["score"] == float(correct)
    assert set(rec) >= {"kind", "image_id", "correct", "status", "pred", "target", "raw", "question_type"}


# ------------------------------------------------------------------------------------------ extraction
@pytest.mark.parametrize("reply,expected", [
    ("B", "B"), ("(C)", "C"), ("B. a cat", "B"), ("The answer is C.", "C"), ("Answer: (D)", "D"),
    ("option a", "A"), ("dog", "C"), ("<think>A? no</think>B", "B"), ("", None), ("I am not sure", None),
    ("A or B", None),
])
def test_extract_choice(reply, expected):
    assert A.extract_choice(reply, list("ABCD"), ["cat", "bird", "dog", "fish"]) == expected


@pytest.mark.parametrize("reply,expected", [("Yes.", "yes"), ("no, it is not", "no"), ("True", "yes"),
                                            ("Answer: false", "no"), ("maybe", None)])
def test_extract_yes_no(reply, expected):
    assert A.extract_yes_no(reply) == expected


@pytest.mark.parametrize("reply,expected", [("7", 7), ("There are three dogs.", 3), ("Answer: 1,234.5", 1234.5),
                                            ("none", None), ("-2.5", -2.5)])
def test_extract_number(reply, expected):
    assert A.extract_number(reply) == expected


# ------------------------------------------------------------------------------------------ hub-schema benchmarks
def test_mmstar(tmp_path, vrh_env, placeholder):
    rows = [{"index": 7, "question": "Which animal?\nOptions: A: cat, B: dog, C: cow, D: fox", "image": _img(),
             "answer": "B", "category": "coarse perception", "l2_category": "image style",
             "meta_info": {"source": "x", "split": "val", "image_path": "a.jpg"}}]
    docs = _docs(vrh_env, placeholder, "vrh_mmstar", "MMSTAR", _write(tmp_path, "val", rows))
    doc = docs[0]
    assert V.doc_to_text(doc).endswith("Answer with the option's letter from the given choices directly.")
    assert doc["vrh_question_type"] == "coarse perception" and doc["image_id"] == "7"
    _check_record(V.process_results(doc, ["B"]), correct=True, status="correct")
    _check_record(V.process_results(doc, ["(A)"]), correct=False, status="wrong")
    _check_record(V.process_results(doc, ["no idea"]), correct=False, status="parse_failure")


def test_cv_bench(tmp_path, vrh_env, placeholder):
    rows = [{"idx": 3, "type": "2D", "task": "Count", "image": _img(), "question": "How many cars?",
             "choices": ["1", "2", "3"], "answer": "(C)", "prompt": "How many cars?\n(A) 1\n(B) 2\n(C) 3",
             "filename": "img/2D/count/ade_3.png", "source": "ADE20K"}]
    doc = _docs(vrh_env, placeholder, "vrh_cv_bench", "CV_BENCH", _write(tmp_path, "test", rows))[0]
    assert V.doc_to_text(doc).startswith("Note: You only need to respond with A, B, C without")
    assert doc["vrh_target"] == "C" and doc["vrh_question_type"] == "2D_Count"
    _check_record(V.process_results(doc, ["(C) 3"]), correct=True, status="correct")


def test_countbench_does_not_leak_the_count(tmp_path, vrh_env, placeholder):
    rows = [{"image": _img(), "text": "Four puppies sleeping on a sofa", "question": "How many puppies are there?",
             "number": 4}]
    doc = _docs(vrh_env, placeholder, "vrh_countbenchqa", "COUNTBENCH", _write(tmp_path, "test", rows))[0]
    prompt = V.doc_to_text(doc)
    assert "Four" not in prompt and "sofa" not in prompt
    assert prompt == "How many puppies are there?\nAnswer with a single number."
    _check_record(V.process_results(doc, ["4"]), correct=True, status="correct")
    _check_record(V.process_results(doc, ["four"]), correct=True, status="correct")
    _check_record(V.process_results(doc, ["5 puppies"]), correct=False, status="wrong")


MATHVISTA_ROWS = [
    {"pid": "1", "question": "Which is larger?", "decoded_image": None, "image": "images/1.jpg",
     "choices": ["the cube", "the ball"], "unit": "", "precision": None, "answer": "the ball",
     "question_type": "multi_choice", "answer_type": "text", "query": "q1"},
    {"pid": "2", "question": "How many sides?", "decoded_image": None, "image": "images/2.jpg", "choices": None,
     "unit": "", "precision": None, "answer": "6", "question_type": "free_form", "answer_type": "integer",
     "query": "q2"},
    {"pid": "3", "question": "What is the length?", "decoded_image": None, "image": "images/3.jpg", "choices": None,
     "unit": "cm", "precision": 1.0, "answer": "2.5", "question_type": "free_form", "answer_type": "float",
     "query": "q3"},
    {"pid": "4", "question": "List the values.", "decoded_image": None, "image": "images/4.jpg", "choices": None,
     "unit": "", "precision": None, "answer": "[1, 2, 3]", "question_type": "free_form", "answer_type": "list",
     "query": "q4"},
]


def test_mathvista_offline_extraction(tmp_path, vrh_env, placeholder):
    rows = [{**r, "decoded_image": _img()} for r in MATHVISTA_ROWS]
    docs = _docs(vrh_env, placeholder, "vrh_mathvista_testmini", "MATHVISTA",
                 _write(tmp_path, "testmini", rows, ("decoded_image",)))
    mc, integer, flt, lst = (docs[i] for i in range(4))
    assert "A. the cube\nB. the ball" in V.doc_to_text(mc)
    assert "(Unit: cm)" in V.doc_to_text(flt) and "one decimal place" in V.doc_to_text(flt)
    assert V.doc_to_visual(mc)[0].size == (64, 48)
    _check_record(V.process_results(mc, ["B"]), correct=True, status="correct")
    _check_record(V.process_results(mc, ["The answer is the ball."]), correct=True, status="correct")
    _check_record(V.process_results(mc, ["A"]), correct=False, status="wrong")
    _check_record(V.process_results(integer, ["6"]), correct=True, status="correct")
    _check_record(V.process_results(integer, ["6.0"]), correct=True, status="correct")
    _check_record(V.process_results(flt, ["2.53"]), correct=True, status="correct")
    _check_record(V.process_results(flt, ["The length is 2.4 cm"]), correct=False, status="wrong")
    _check_record(V.process_results(lst, ["[1, 2, 3]"]), correct=True, status="correct")
    _check_record(V.process_results(integer, ["unknown"]), correct=False, status="parse_failure")


def test_spatial457_levels(tmp_path, vrh_env, placeholder):
    rows = [{"image": _img(), "image_filename": "superCLEVR_new_000001.png", "question": q, "answer": a,
             "question_index": i} for i, (q, a) in enumerate([("Is there a red bus?", "True"),
                                                               ("How many cars?", "2"),
                                                               ("What color is the bike?", "blue")])]
    # lmms-lab-eval/Spatial457 snapshots keep one folder per config: L2_objects/test-00000-of-00001.parquet
    (tmp_path / "L2_objects").mkdir()
    _write(tmp_path / "L2_objects", "test", rows).joinpath("test.parquet").rename(
        tmp_path / "L2_objects" / "test-00000-of-00001.parquet")
    docs = _docs(vrh_env, placeholder, "vrh_spatial457_l2_objects", "SPATIAL457", tmp_path)
    assert docs[0]["vrh_question_type"] == "L2_objects"
    _check_record(V.process_results(docs[0], ["Yes"]), correct=True, status="correct")
    _check_record(V.process_results(docs[1], ["two"]), correct=True, status="correct")
    _check_record(V.process_results(docs[2], ["Blue."]), correct=True, status="correct")
    _check_record(V.process_results(docs[2], ["red"]), correct=False, status="wrong")


# ------------------------------------------------------------------------------------------ VAW (local only)
@pytest.fixture
def vaw_root(tmp_path):
    root = tmp_path / "vaw_dataset"
    (root / "data").mkdir(parents=True)
    images = tmp_path / "VG_100K"
    images.mkdir()
    _img(size=(100, 80)).save(images / "11.jpg")
    (root / "data" / "test.json").write_text(json.dumps([
        {"image_id": 11, "instance_id": 5, "instance_bbox": [10, 20, 30, 40], "instance_polygon": None,
         "object_name": "shirt", "positive_attributes": ["red"], "negative_attributes": ["striped", "wet"]}]))
    for name in ("attribute_types.json", "attribute_parent_types.json"):  # the real files (tests/fixtures)
        shutil.copy(REAL / f"vaw_{name}", root / "data" / name)
    return root, images


def test_vaw_yes_no_questions(vaw_root, vrh_env, placeholder):
    root, images = vaw_root
    vrh_env.setenv("VRH_VAW_ROOT", str(root))
    vrh_env.setenv("VRH_VAW_IMAGES", str(images))
    docs = VD.vrh_vaw(placeholder())
    assert len(docs) == 3
    assert V.doc_to_text(docs[0]) == "Is the shirt in the red box red? Answer yes or no."
    assert docs["vrh_target"] == ["yes", "no", "no"]
    assert docs["vrh_question_type"] == ["color", "texture", "state"]  # red: color; striped: pattern -> texture
    drawn = np.asarray(V.doc_to_visual(docs[0])[0])
    assert tuple(drawn[20, 25]) == (255, 0, 0) and tuple(drawn[5, 5]) == (90, 90, 90)  # top edge of the box
    out = V.process_results(docs[1], ["No, it is plain."])
    _check_record(out, correct=True, status="correct")
    assert out["vrh_record"]["attribute"] == "striped" and out["vrh_record"]["polarity"] == "negative"
    vrh_env.setenv("VRH_VAW_MODE", "crop")
    crop = VD.vrh_vaw(placeholder())[0]
    assert V.doc_to_visual(crop)[0].size == (30, 40) and V.doc_to_text(crop) == "Is the shirt red? Answer yes or no."


def test_vaw_needs_its_root(vrh_env, placeholder):
    with pytest.raises(SourceError, match="VRH_VAW_ROOT"):
        VD.vrh_vaw(placeholder())


# ------------------------------------------------------------------------------------------ SpatialRGPT
def test_spatialrgpt_local_json(tmp_path, vrh_env, placeholder):
    root = tmp_path / "srgpt"
    (root / "SUNRGBD").mkdir(parents=True)
    _img(size=(120, 90)).save(root / "SUNRGBD" / "a.jpg")
    base = {"image_info": {"file_path": "SUNRGBD/a.jpg", "height": 90, "width": 120},
            "bbox": [[10, 10, 40, 40], [60, 30, 100, 80]], "rle": []}
    records = [
        {**base, "id": "q1", "text_q": "Is <mask> behind <mask>?", "qa_info": {"type": "qualitative",
                                                                            "category": "behind_predicate"},
         "conversations": [{"from": "human", "value": "<image>\nIs <mask> <depth> behind <mask> <depth>?"},
                           {"from": "gpt", "value": "Yes, Region [0] is behind Region [1]."}]},
        {**base, "id": "q2", "text_q": "Which is taller, Region [0] or Region [1]?",
         "qa_info": {"type": "qualitative", "category": "tall_choice"},
         "conversations": [{"from": "human", "value": "x"}, {"from": "gpt", "value": "Region [1] is taller."}]},
        {**base, "id": "q3", "text_q": "How far apart are Region [0] and Region [1]?",
         "qa_info": {"type": "quantitative", "category": "distance_data"},
         "conversations": [{"from": "human", "value": "x"}, {"from": "gpt", "value": "They are 2 meters apart."}]},
    ]
    (root / "SpatialRGPT-Bench_v1.json").write_text(json.dumps(records))
    vrh_env.setenv("VRH_SPATIALRGPT_ROOT", str(root))
    docs = VD.vrh_spatialrgpt(placeholder())
    assert "Is Region [0] behind Region [1]?" in V.doc_to_text(docs[0])
    image = np.asarray(V.doc_to_visual(docs[0])[0])
    assert tuple(image[10, 20]) == (255, 0, 0)
    _check_record(V.process_results(docs[0], ["Yes."]), correct=True, status="correct")
    _check_record(V.process_results(docs[1], ["Region [0]"]), correct=False, status="wrong")
    _check_record(V.process_results(docs[1], ["region 1"]), correct=True, status="correct")
    _check_record(V.process_results(docs[2], ["About 220 cm."]), correct=True, status="correct")
    _check_record(V.process_results(docs[2], ["4 feet"]), correct=False, status="wrong")
    _check_record(V.process_results(docs[2], ["far"]), correct=False, status="parse_failure")
