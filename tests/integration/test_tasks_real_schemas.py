"""Loaders and scoring on fixtures in the benchmarks' *published* schemas and file layouts (issue 12).

Each test names where its schema comes from. Shared excerpts of real files live in tests/fixtures/real_excerpts/.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vrh_lmms.base.boxes import context
from vrh_lmms.tasks.common import grounding as G
from vrh_lmms.tasks.common import grounding_data as GD
from vrh_lmms.tasks.common import vqa as V
from vrh_lmms.tasks.common import vqa_data as VD
from vrh_lmms.tasks.common.sources import SourceError

REAL = Path(__file__).parents[1] / "fixtures" / "real_excerpts"


def _img(size=(64, 48), color=(90, 90, 90)):
    return Image.new("RGB", size, color)


def _parquet(path: Path, rows: list[dict], image_cols=("image",)) -> Path:
    import datasets

    ds = datasets.Dataset.from_list(rows)
    for c in image_cols:
        ds = ds.cast_column(c, datasets.Image())
    path.parent.mkdir(parents=True, exist_ok=True)
    ds.to_parquet(str(path))
    return path


# ------------------------------------------------------------------------------------------ 1. SpatialRGPT-Bench
def _spatialrgpt_rows() -> list[dict]:
    """Rows as the current a8cheng/SpatialRGPT-Bench parquet stores them: split `val`, an `image` column, and the
    nested fields as `str(obj)` Python literals, which public loaders parse with `ast.literal_eval`
    (github.com/kasohrab/theworld python/theworld/datasets/spatial_rgpt.py; SpatialRGPT llava/eval/eval_spatial.py
    for the field names)."""
    base = {"image_info": str({"file_path": "SUNRGBD/kv2/kinect2data/000065_2014-05-16/image/0000103.jpg",
                               "height": 90, "width": 120}),
            "bbox": str([[10.0, 10.0, 40.0, 40.0], [60.0, 30.0, 100.0, 80.0]]), "rle": str([])}
    return [
        {**base, "id": "0", "image": _img((120, 90)), "text_q": "Is Region [0] behind Region [1]?",
         "qa_info": str({"type": "qualitative", "category": "behind_predicate"}),
         # an apostrophe makes repr() switch quotes: neither JSON nor a quote swap can read this
         "conversations": str([{"from": "human", "value": "<image>\nIs <mask> <depth> behind <mask> <depth>?"},
                               {"from": "gpt", "value": "No, Region [0] isn't behind Region [1]."}])},
        {**base, "id": "1", "image": _img((120, 90)), "text_q": "How far apart are Region [0] and Region [1]?",
         "qa_info": str({"type": "quantitative", "category": "distance_data"}),
         "conversations": str([{"from": "human", "value": "<image>\nHow far apart are <mask> <depth> and <mask>?"},
                               {"from": "gpt", "value": "They are 2.1 meters apart."}])},
    ]


def test_spatialrgpt_hub_rows_split_val_python_literals(tmp_path, vrh_env, placeholder):
    snap = tmp_path / "SpatialRGPT-Bench"
    _parquet(snap / "data" / "val-00000-of-00001.parquet", _spatialrgpt_rows())
    assert VD.TASK_SPLITS["vrh_spatialrgpt"] == ("spatialrgpt", "val")
    vrh_env.setenv("VRH_SPATIALRGPT_DATA", str(snap))
    docs = VD.vrh_spatialrgpt(placeholder())
    assert len(docs) == 2 and docs[0]["vrh_target"] == "No, Region [0] isn't behind Region [1]."
    assert "Is Region [0] behind Region [1]?" in V.doc_to_text(docs[0])
    assert json.loads(docs[0]["vrh_meta"])["draw_boxes"] == [[10.0, 10.0, 40.0, 40.0], [60.0, 30.0, 100.0, 80.0]]
    assert docs[0]["image_id"].startswith("SUNRGBD/") and docs[1]["vrh_question_type"] == "distance_data"
    out = V.process_results(docs[0], ["No."])
    assert out["acc"]["score"] == 1.0 and out["vrh_record"]["qa_type"] == "qualitative"
    assert V.process_results(docs[1], ["About 200 cm."])["acc"]["score"] == 1.0
    # the working hub route for a downloaded snapshot: VRH_<KEY>_HUB=<snapshot folder>, same rows
    vrh_env.delenv("VRH_SPATIALRGPT_DATA")
    vrh_env.setenv("VRH_SPATIALRGPT_HUB", str(snap))
    assert VD.vrh_spatialrgpt(placeholder())["vrh_target"] == docs["vrh_target"]


def test_spatialrgpt_bad_nested_field_is_named(tmp_path, vrh_env, placeholder):
    rows = _spatialrgpt_rows()[:1]
    rows[0]["qa_info"] = "qualitative"
    _parquet(tmp_path / "val.parquet", rows)
    vrh_env.setenv("VRH_SPATIALRGPT_DATA", str(tmp_path))
    with pytest.raises(SourceError, match=r"record '0' field 'qa_info' is not a dict"):
        VD.vrh_spatialrgpt(placeholder())


# ------------------------------------------------------------------------------------------ 2. VAW types
@pytest.fixture
def vaw_real(tmp_path):
    """adobe-research/vaw_dataset layout: data/test.json (README schema: image_id, instance_id, instance_bbox xywh,
    instance_polygon, object_name, positive_attributes, negative_attributes) + the two real type files."""
    root = tmp_path / "vaw_dataset"
    (root / "data").mkdir(parents=True)
    images = tmp_path / "VG_100K"
    images.mkdir()
    for image_id in (2380081, 2412620):
        _img((160, 120)).save(images / f"{image_id}.jpg")
    instances = [
        {"image_id": 2380081, "instance_id": 3958398, "instance_bbox": [12.0, 30.0, 70.0, 50.0],
         "instance_polygon": [[[12, 30], [82, 30], [82, 80], [12, 80]]], "object_name": "shirt",
         "positive_attributes": ["striped", "white"], "negative_attributes": ["wet", "larger"]},
        {"image_id": 2412620, "instance_id": 1002841, "instance_bbox": [5.0, 8.0, 40.0, 60.0],
         "instance_polygon": None, "object_name": "man",
         "positive_attributes": ["standing"], "negative_attributes": ["dark", "thin", "wooden", "white"]},
    ]
    (root / "data" / "test.json").write_text(json.dumps(instances))
    for name in ("attribute_types.json", "attribute_parent_types.json"):
        shutil.copy(REAL / f"vaw_{name}", root / "data" / name)
    return root, images


def _official_parent(attr: str) -> str:
    """adobe-research/vaw_dataset eval/evaluator.py get_attr_type, restated: first subtype, then first parent."""
    subtypes = json.loads((REAL / "vaw_attribute_types.json").read_text())
    parents = json.loads((REAL / "vaw_attribute_parent_types.json").read_text())
    sub = next((s for s, attrs in subtypes.items() if attr in attrs), "other")
    return next((p for p, subs in parents.items() if sub in subs), "other")


def test_vaw_question_types_chain_subtype_to_parent(vaw_real, vrh_env, placeholder):
    root, images = vaw_real
    vrh_env.setenv("VRH_VAW_ROOT", str(root))
    vrh_env.setenv("VRH_VAW_IMAGES", str(images))
    docs = VD.vrh_vaw(placeholder())
    attrs = [json.loads(m)["attribute"] for m in docs["vrh_meta"]]
    assert attrs == ["striped", "white", "wet", "larger", "standing", "dark", "thin", "wooden", "white"]
    assert docs["vrh_question_type"] == [_official_parent(a) for a in attrs]
    assert docs["vrh_question_type"] == ["texture", "color", "state", "other", "action", "color", "size",
                                         "material", "color"]
    rec = V.process_results(docs[0], ["Yes, it is striped."])["vrh_record"]
    assert (rec["attribute"], rec["polarity"], rec["attribute_type"], rec["parent_type"]) == \
        ("striped", "positive", "pattern", "texture")
    assert rec["instance_id"] == "3958398" and rec["image_id"] == "2380081"


def test_vaw_without_type_files_is_a_clear_error(vaw_real, vrh_env, placeholder):
    root, images = vaw_real
    (root / "data" / "attribute_types.json").unlink()
    vrh_env.setenv("VRH_VAW_ROOT", str(root))
    vrh_env.setenv("VRH_VAW_IMAGES", str(images))
    with pytest.raises(SourceError, match="attribute_types.json missing"):
        VD.vrh_vaw(placeholder())


# ------------------------------------------------------------------------------------------ 3. CV-Bench source
def cv_bench_rows() -> list[dict]:
    """nyu-visionx/CV-Bench test rows (card + lmms-eval cv_bench/utils.py fields: idx, type, task, image, question,
    choices, answer '(A)', prompt, filename, source, source_dataset, source_filename, target_class, target_size,
    bbox); `2D_Count` mixes ADE20K and COCO images."""
    rows = []
    for i, (typ, task, source) in enumerate([("2D", "Count", "ADE20K"), ("2D", "Count", "COCO"),
                                             ("2D", "Relation", "COCO"), ("3D", "Depth", "Omni3D"),
                                             ("3D", "Distance", "Omni3D")]):
        rows.append({"idx": i, "type": typ, "task": task, "image": _img(), "question": f"Question {i}?",
                     "choices": ["one", "two"], "answer": "(A)", "prompt": f"Question {i}?\n(A) one\n(B) two",
                     "filename": f"img/{typ}/{task.lower()}/{source.lower()}_{i}.png", "source": source,
                     "source_dataset": source, "source_filename": f"{i}.jpg", "target_class": None,
                     "target_size": None, "bbox": None})
    return rows


def test_cv_bench_records_keep_the_image_source(tmp_path, vrh_env, placeholder):
    _parquet(tmp_path / "test.parquet", cv_bench_rows())
    vrh_env.setenv("VRH_CV_BENCH_DATA", str(tmp_path))
    docs = VD.vrh_cv_bench(placeholder())
    recs = [V.process_results(d, ["A"])["vrh_record"] for d in docs]
    assert [r["source"] for r in recs] == ["ADE20K", "COCO", "COCO", "Omni3D", "Omni3D"]
    assert recs[0]["question_type"] == recs[1]["question_type"] == "2D_Count"  # the type alone mixes sources


# ------------------------------------------------------------------------------------------ 4. local files
def _s457(i: int, level: str) -> dict:
    return {"image": _img(), "image_filename": f"superCLEVR_new_{i:06d}.png", "question": f"{level} q{i}?",
            "answer": "True", "question_index": i}


def test_spatial457_snapshot_one_folder_per_config(tmp_path, vrh_env, placeholder):
    """lmms-lab-eval/Spatial457: one folder per config, sharded `test-0000k-of-0000N.parquet` (hub listing)."""
    snap = tmp_path / "Spatial457"
    _parquet(snap / "L1_single" / "test-00000-of-00001.parquet", [_s457(0, "L1")])
    _parquet(snap / "L2_objects" / "test-00000-of-00002.parquet", [_s457(1, "L2")])
    _parquet(snap / "L2_objects" / "test-00001-of-00002.parquet", [_s457(2, "L2")])
    vrh_env.setenv("VRH_SPATIAL457_DATA", str(snap))
    l1, l2 = VD.vrh_spatial457_l1_single(placeholder()), VD.vrh_spatial457_l2_objects(placeholder())
    assert [d["vrh_prompt"].split("?")[0] for d in l1] == ["L1 q0"]
    assert [d["vrh_prompt"].split("?")[0] for d in l2] == ["L2 q1", "L2 q2"]  # both shards, nothing of L1
    assert set(l2["vrh_question_type"]) == {"L2_objects"}
    with pytest.raises(SourceError, match="no files of config 'L3_2d_spatial'"):
        VD.vrh_spatial457_l3_2d_spatial(placeholder())
    vrh_env.setenv("VRH_SPATIAL457_DATA", str(snap / "L1_single" / "test-00000-of-00001.parquet"))
    with pytest.raises(SourceError, match="one file, but this task reads config 'L2_objects'"):
        VD.vrh_spatial457_l2_objects(placeholder())


def test_cv_bench_root_files_per_config(tmp_path, vrh_env, placeholder):
    """nyu-visionx/CV-Bench keeps test.parquet (all), test_2d.parquet and test_3d.parquet side by side."""
    rows = cv_bench_rows()
    _parquet(tmp_path / "test.parquet", rows)
    _parquet(tmp_path / "test_2d.parquet", [r for r in rows if r["type"] == "2D"])
    _parquet(tmp_path / "test_3d.parquet", [r for r in rows if r["type"] == "3D"])
    vrh_env.setenv("VRH_CV_BENCH_DATA", str(tmp_path))
    assert len(VD.vrh_cv_bench(placeholder())) == 5
    assert set(VD.vrh_cv_bench_2d(placeholder())["vrh_question_type"]) == {"2D_Count", "2D_Relation"}
    assert set(VD.vrh_cv_bench_3d(placeholder())["vrh_question_type"]) == {"3D_Depth", "3D_Distance"}


def test_snapshot_readme_configs_and_hub_route(tmp_path, vrh_env, placeholder):
    """A hub snapshot whose README declares `configs` (the card YAML the hub reads) maps files as the hub does."""
    snap = tmp_path / "CV-Bench"
    rows = cv_bench_rows()
    _parquet(snap / "test.parquet", rows)
    _parquet(snap / "test_2d.parquet", [r for r in rows if r["type"] == "2D"])
    _parquet(snap / "test_3d.parquet", [r for r in rows if r["type"] == "3D"])
    (snap / "README.md").write_text(
        "---\nlicense: apache-2.0\nconfigs:\n- config_name: default\n  data_files:\n  - split: test\n"
        "    path: test.parquet\n- config_name: 2D\n  data_files:\n  - split: test\n    path: test_2d.parquet\n"
        "- config_name: 3D\n  data_files:\n  - split: test\n    path: test_3d.parquet\n---\n# CV-Bench\n")
    for var in ("VRH_CV_BENCH_DATA", "VRH_CV_BENCH_HUB"):
        vrh_env.setenv(var, str(snap))
        assert len(VD.vrh_cv_bench(placeholder())) == 5, var
        assert set(VD.vrh_cv_bench_3d(placeholder())["vrh_question_type"]) == {"3D_Depth", "3D_Distance"}, var
        vrh_env.delenv(var)


def test_default_config_reads_sharded_split_under_data(tmp_path, vrh_env, placeholder):
    """vikhyatk/CountBenchQA and most hub datasets: data/<split>-0000k-of-0000N.parquet."""
    rows = [{"image": _img(), "text": f"{n} cats", "question": "How many cats?", "number": n} for n in (2, 3, 4)]
    _parquet(tmp_path / "data" / "test-00000-of-00002.parquet", rows[:2])
    _parquet(tmp_path / "data" / "test-00001-of-00002.parquet", rows[2:])
    vrh_env.setenv("VRH_COUNTBENCH_DATA", str(tmp_path))
    assert VD.vrh_countbenchqa(placeholder())["vrh_target"] == ["2", "3", "4"]


# ------------------------------------------------------------------------------------------ 5. Toloka images
@pytest.fixture
def toloka_csv(tmp_path):
    folder = tmp_path / "WSDMCup2023"
    folder.mkdir()
    shutil.copy(REAL / "toloka_test_public_head.csv", folder / "test_public.csv")  # the real file's head
    return folder


def test_toloka_urls_offline_fail_once_naming_the_variable(toloka_csv, vrh_env, placeholder):
    vrh_env.setenv("HF_HUB_OFFLINE", "1")
    vrh_env.setenv("VRH_TOLOKA_DATA", str(toloka_csv))
    with pytest.raises(SourceError, match=r"offline; set VRH_TOLOKA_IMAGES .*000000001066\.jpg"):
        GD.vrh_toloka(placeholder())


def test_toloka_offline_image_root(toloka_csv, tmp_path, vrh_env, placeholder):
    images = tmp_path / "coco"
    (images / "val2017").mkdir(parents=True)
    for name, size in (("000000001066.jpg", (500, 375)), ("000000001255.jpg", (480, 640))):
        _img(size).save(images / name)
    _img((500, 375)).save(images / "val2017" / "000000001357.jpg")
    vrh_env.setenv("HF_HUB_OFFLINE", "1")
    vrh_env.setenv("VRH_TOLOKA_DATA", str(toloka_csv))
    vrh_env.setenv("VRH_TOLOKA_IMAGES", str(images))
    docs = GD.vrh_toloka(placeholder())
    assert docs["image_id"] == ["000000001066", "000000001255", "000000001357"]
    assert docs[0]["gt_box"] == [130.0, 160.0, 217.0, 367.0] and docs[1]["image"].size == (480, 640)
    assert docs[0]["expression"] == "Where can we cook meals"
    (images / "000000001255.jpg").unlink()
    with pytest.raises(SourceError, match=r"1 of 3 Toloka images are not in .*000000001255\.jpg.*VRH_TOLOKA_IMAGES"):
        GD.vrh_toloka(placeholder())


# ------------------------------------------------------------------------------------------ 7. GLM cut thinking
# GLM-4.1V-Thinking answers "<think>reasoning</think><answer>...<|begin_of_box|>[x1, y1, x2, y2]<|end_of_box|>
# </answer>" (zai-org/GLM-V README; <think> and the box tokens survive skip_special_tokens). Our grounding YAMLs
# cap max_new_tokens at 128, so long reasoning is cut inside <think>: its boxes are drafts, not the answer.
GLM_CUT = ("<think>The user wants the red mug. I can see a mug on the left, roughly at [112, 340, 260, 610] on "
           "the 1000 grid, but there is another one near the window, so let me compare their colors. The left one")
GLM_DONE = ("<think>The mug on the left is red; the other is blue.</think><answer>The red mug is on the left."
            "<|begin_of_box|>[112,340,260,610]<|end_of_box|></answer>")


def test_glm_reply_cut_inside_think_is_a_parse_failure(vrh_env):
    vrh_env.setenv(context.ENV_VAR, "glm4v")
    doc = {"vrh_key": "glm#0", "expression": "the red mug", "gt_box": [112.0, 340.0, 260.0, 610.0],
           "image_width": 1000, "image_height": 1000, "image_id": "1", "question_id": "1"}
    G.doc_to_text(doc)
    cut = G.process_results(doc, [GLM_CUT])
    assert cut["vrh_record"]["status"] == "parse_failure" and cut["vrh_record"]["pred_box"] is None
    done = G.process_results(doc, [GLM_DONE])
    assert done["vrh_record"]["status"] == "correct" and done["iou"]["score"] == pytest.approx(1.0)


def test_cut_thinking_yes_no_reply_is_a_parse_failure():
    doc = {"vrh_answer_type": "yes_no", "vrh_target": "yes", "vrh_meta": "{}", "image_id": "1"}
    assert V.process_results(doc, ["<think>Is it red? yes, probably, but the light"])["parse_failure"]["score"] == 1.0
    assert V.process_results(doc, ["<think>red or orange</think><answer>Yes</answer>"])["acc"]["score"] == 1.0


# ------------------------------------------------------------------------------------------ 9. RefSpatial masks
def test_refspatial_any_nonzero_mask_pixel_is_inside(vrh_env):
    """RoboRefer Evaluation/summarize_acc.py: `mask = np.array(Image.open(mask_path)) / 255.; mask = (mask > 0)`.
    A mask stored with 0/1 values (or an anti-aliased edge) still marks its pixels."""
    mask = np.zeros((50, 80), np.uint8)
    mask[10:20, 10:20] = 1
    mask[30:40, 50:60] = 100
    doc = {"vrh_key": "rs#0", "mask": Image.fromarray(mask), "expression": "the spot", "image_id": "4"}
    vrh_env.setenv(context.ENV_VAR, "generic")
    G.point_doc_to_text(doc)
    assert G.point_process_results(doc, ["[(0.19, 0.3)]"])["acc"] == 1.0  # (15.2, 15): value 1
    assert G.point_process_results(doc, ["[(0.69, 0.7)]"])["acc"] == 1.0  # (55.2, 35): value 100
    assert G.point_process_results(doc, ["[(0.5, 0.9)]"])["acc"] == 0.0
