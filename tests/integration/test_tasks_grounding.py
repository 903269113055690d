"""Grounding tasks on local synthetic data: hub layout, refer layout, spec rows, Toloka/RefSpatial local files,
and the records process_results emits."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from vrh_lmms.base.boxes import context, get_convention
from vrh_lmms.base.synth.layouts import hub_rows, write_hub_layout, write_refer_layout
from vrh_lmms.base.synth.scenes import SceneConfig, generate_scenes
from vrh_lmms.tasks.common import grounding as G
from vrh_lmms.tasks.common import grounding_data as GD
from vrh_lmms.tasks.common.sources import SourceError

REFCOCO_TASKS = {
    "vrh_refcoco_val": ("REFCOCO", "refcoco", "unc"), "vrh_refcoco_testA": ("REFCOCO", "refcoco", "unc"),
    "vrh_refcoco_testB": ("REFCOCO", "refcoco", "unc"), "vrh_refcoco_plus_val": ("REFCOCO_PLUS", "refcoco+", "unc"),
    "vrh_refcoco_plus_testA": ("REFCOCO_PLUS", "refcoco+", "unc"),
    "vrh_refcoco_plus_testB": ("REFCOCO_PLUS", "refcoco+", "unc"),
    "vrh_refcocog_val": ("REFCOCOG", "refcocog", "umd"), "vrh_refcocog_test": ("REFCOCOG", "refcocog", "umd"),
}
SPLITS = {"val": (0, 3), "testA": (3, 2), "testB": (5, 2), "test": (7, 2)}
DOC_COLUMNS = {"image", "expression", "gt_box", "image_id", "question_id", "image_width", "image_height", "vrh_key"}


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    """Synthetic scenes written in the hub layout and, for all three datasets, in one refer root."""
    root = tmp_path_factory.mktemp("synth_layouts")
    hub = root / "hub"
    write_hub_layout(hub, SPLITS, seed=7)
    refer = root / "refer"
    for dataset, split_by in (("refcoco", "unc"), ("refcoco+", "unc"), ("refcocog", "umd")):
        write_refer_layout(refer, SPLITS, seed=7, dataset=dataset, split_by=split_by)
    return {"hub": hub, "refer": refer}


def _split(task: str) -> str:
    return GD.TASK_SPLITS[task][1]


def _expected(split: str):
    start, count = SPLITS[split]
    return generate_scenes(count, seed=7, start=start)


def _check_docs(docs, task, split):
    scenes = _expected(split)
    assert DOC_COLUMNS <= set(docs.column_names)
    assert len(docs) == len(scenes)
    for doc, scene in zip(docs, scenes):
        x, y, w, h = scene.target_object.bbox
        assert doc["gt_box"] == [x, y, x + w, y + h]
        assert doc["expression"] == scene.expression
        assert doc["image_id"] == str(scene.scene_id)
        assert (doc["image_width"], doc["image_height"]) == doc["image"].size == scene.image.size
        assert np.array_equal(np.asarray(doc["image"].convert("RGB")), np.asarray(scene.image))
    assert docs[0]["vrh_key"] == f"{task}#0"


@pytest.mark.parametrize("task", sorted(REFCOCO_TASKS))
def test_refcoco_family_hub_layout(task, layouts, vrh_env, placeholder):
    key = REFCOCO_TASKS[task][0]
    vrh_env.setenv(f"VRH_{key}_DATA", str(layouts["hub"]))
    docs = getattr(GD, task)(placeholder())
    _check_docs(docs, task, _split(task))


@pytest.mark.parametrize("task", sorted(REFCOCO_TASKS))
def test_refcoco_family_refer_layout(task, layouts, vrh_env, placeholder):
    # One VRH_REFCOCO_ROOT serves RefCOCO, RefCOCO+ (refcoco+/refs(unc).p) and RefCOCOg (refcocog/refs(umd).p).
    vrh_env.setenv("VRH_REFCOCO_ROOT", str(layouts["refer"]))
    docs = getattr(GD, task)(placeholder())
    _check_docs(docs, task, _split(task))


def test_spec_row_selects_the_source(layouts, vrh_env, placeholder):
    docs = GD.vrh_refcoco_testB(placeholder(vrh_source="refer", root=str(layouts["refer"])))
    _check_docs(docs, "vrh_refcoco_testB", "testB")
    docs = GD.vrh_refcoco_testB(placeholder(vrh_source="files", path=str(layouts["hub"])))
    _check_docs(docs, "vrh_refcoco_testB", "testB")


def test_rows_loaded_by_lmms_eval_are_normalised(layouts, vrh_env):
    import datasets

    rows = datasets.load_dataset("parquet", data_files={"val": str(layouts["hub"] / "val.parquet")}, split="val")
    _check_docs(GD.vrh_refcoco_val(rows), "vrh_refcoco_val", "val")


def test_one_doc_per_expression_with_image_ids(tmp_path, vrh_env, placeholder):
    """lmms-lab rows carry every sentence of an object in `answer`; each becomes a doc, images kept encoded."""
    import datasets

    rows = hub_rows(generate_scenes(3, seed=1))
    for i, row in enumerate(rows):
        row["answer"] = [f"{row['answer'][0]} #{k}" for k in range(i + 1)]
        row["file_name"] = f"COCO_train2014_{1000 + i:012d}_{i}.jpg"
        del row["image_id"]  # lmms-lab rows have none: it comes from the COCO file name
    datasets.Dataset.from_list(rows).cast_column("image", datasets.Image()).to_parquet(str(tmp_path / "val.parquet"))
    vrh_env.setenv("VRH_REFCOCO_DATA", str(tmp_path))
    docs = GD.vrh_refcoco_val(placeholder())
    assert len(docs) == 1 + 2 + 3
    assert docs["image_id"] == ["1000", "1001", "1001", "1002", "1002", "1002"]
    assert docs["expression"][3:] == [f"{rows[2]['answer'][0][:-3]} #{k}" for k in range(3)]
    assert docs["question_id"] == ["0", "1", "1", "2", "2", "2"]
    assert docs[5]["image"].size == (224, 224)


@pytest.mark.parametrize("env,match", [
    ({"VRH_REFCOCO_SOURCE": "refer"}, "VRH_REFCOCO_ROOT"),
    ({"VRH_REFCOCO_SOURCE": "files"}, "VRH_REFCOCO_DATA"),
    ({"VRH_REFCOCO_SOURCE": "synth"}, "not available"),
    ({"VRH_REFCOCO_DATA": "/nonexistent/vrh"}, "does not exist"),
])
def test_bad_source_settings_name_the_setting(env, match, vrh_env, placeholder):
    for k, v in env.items():
        vrh_env.setenv(k, v)
    with pytest.raises(SourceError, match=match):
        GD.vrh_refcoco_val(placeholder())


def test_refer_errors_name_the_problem(layouts, tmp_path, vrh_env, placeholder):
    vrh_env.setenv("VRH_REFCOCO_ROOT", str(layouts["refer"]))
    with pytest.raises(SourceError, match=r"no refs in split 'nope'; splits: test, testA, testB, val"):
        GD.load_docs("refcoco", "nope", "t", placeholder())
    with pytest.raises(SourceError, match=r"refs\(google\).p"):
        GD.vrh_refcoco_val(placeholder(vrh_source="refer", root=str(layouts["refer"]), split_by="google"))
    no_images = _copy_without_images(layouts["refer"], tmp_path)
    with pytest.raises(SourceError, match="synth_00000000.png not found"):
        GD.vrh_refcoco_val(placeholder(vrh_source="refer", root=str(no_images)))


def _copy_without_images(src, tmp_path):
    import shutil

    dst = tmp_path / "refer_no_images"
    shutil.copytree(src / "refcoco", dst / "refcoco")
    return dst


# ------------------------------------------------------------------------------------------ scoring
def _doc(**kw):
    base = {"expression": "the red circle", "gt_box": [40.0, 40.0, 120.0, 120.0], "image_id": "5",
            "question_id": "5", "image_width": 224, "image_height": 224, "vrh_key": "t#0"}
    return {**base, **kw}


def test_process_results_records(vrh_env):
    vrh_env.setenv(context.ENV_VAR, "qwen2_5_vl:min_pixels=50176,max_pixels=50176")  # 224 stays 224
    doc = _doc()
    assert G.doc_to_text(doc) == get_convention("qwen2_5_vl").prompt("the red circle")
    ok = G.process_results(doc, ['[{"bbox_2d": [42, 38, 118, 121], "label": "circle"}]'])
    rec = ok["vrh_record"]
    assert ok["acc50"]["score"] == 1.0 and ok["parse_failure"]["score"] == 0.0 and ok["mislocated"]["score"] == 0.0
    assert ok["iou"]["score"] > 0.9 and ok["acc50"]["image_id"] == "5" and ok["score"] == 1.0
    assert rec["kind"] == "grounding" and rec["status"] == "correct" and rec["correct"] is True
    assert rec["pred_box"] == [42, 38, 118, 121] and rec["gt_box"] == [40, 40, 120, 120]
    assert rec["image_id"] == "5" and rec["image_size"] == [224, 224] and rec["n_boxes"] == 1
    assert rec["convention"] == "qwen2_5_vl" and rec["expression"] == "the red circle"
    assert set(rec) >= {"kind", "image_id", "pred_box", "gt_box", "iou", "correct", "status", "n_boxes",
                        "convention", "image_size", "raw", "expression"}
    off = G.process_results(doc, ['[{"bbox_2d": [150, 150, 220, 220]}]'])
    assert off["vrh_record"]["status"] == "mislocated" and off["mislocated"]["score"] == 1.0
    assert off["acc50"]["score"] == 0.0 and off["score"] == 0.0
    bad = G.process_results(doc, ["I do not know"])
    assert bad["vrh_record"]["status"] == "parse_failure" and bad["vrh_record"]["pred_box"] is None
    assert bad["parse_failure"]["score"] == 1.0 and bad["iou"]["score"] == 0.0 and bad["mislocated"]["score"] == 0.0
    empty = G.process_results(doc, [])
    assert empty["vrh_record"]["status"] == "parse_failure"


def test_scoring_uses_the_convention_the_prompt_used(vrh_env):
    doc = _doc(vrh_key="t#7")
    G.doc_to_text(doc, {"convention": "qwen3_vl"})  # model-name mapping for --model qwen3_vl
    context.set_active("internvl")  # something else changes later: the reply was asked for in qwen3_vl's format
    out = G.process_results(doc, ['[{"bbox_2d": [179, 179, 536, 536]}]'])
    assert out["vrh_record"]["convention"] == "qwen3_vl" and out["acc50"]["score"] == 1.0


def test_task_kwarg_override_and_active_wrapper(vrh_env):
    doc = _doc(vrh_key="t#8")
    context.set_active("paligemma")
    assert G.doc_to_text(doc, {"convention": "qwen2_5_vl"}) == "detect the red circle"
    assert G.doc_to_text(doc, {"convention": "qwen2_5_vl", "box_convention": "internvl"}).endswith(
        "<ref>the red circle</ref>")


# ------------------------------------------------------------------------------------------ synthetic tasks
def test_synth_task_generates_once_and_is_deterministic(vrh_env, placeholder, tmp_path):
    docs = GD.vrh_synth_grounding(placeholder())
    assert len(docs) == 100 and docs[0]["vrh_key"] == "vrh_synth_grounding#0"
    cached = list((tmp_path / "vrh_cache" / "synth").iterdir())
    assert len(cached) == 1 and (cached[0] / "test.parquet").is_file()
    again = GD.vrh_synth_grounding(placeholder())
    assert again["gt_box"] == docs["gt_box"] and again["expression"] == docs["expression"]
    assert len(list((tmp_path / "vrh_cache" / "synth").iterdir())) == 1


def test_synth_config_and_prepared_data(vrh_env, placeholder, tmp_path):
    vrh_env.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 5, "seed": 3, "scene": {"image_size": 160}}))
    docs = GD.vrh_synth_grounding(placeholder())
    assert len(docs) == 5 and docs[0]["image"].size == (160, 160)
    assert docs["expression"] == [s.expression for s in generate_scenes(5, seed=3, cfg=SceneConfig(image_size=160))]
    held_out = tmp_path / "held_out"
    write_hub_layout(held_out, {"test": (500, 4)}, seed=2)
    vrh_env.setenv("VRH_SYNTH_DATA", str(held_out))
    docs = GD.vrh_synth_grounding(placeholder())
    assert docs["image_id"] == ["500", "501", "502", "503"]


def test_synth_refer_task(vrh_env, placeholder, layouts):
    vrh_env.setenv("VRH_SYNTH_CONFIG", '{"n": 4}')
    docs = GD.vrh_synth_grounding_refer(placeholder())
    hub = GD.vrh_synth_grounding(placeholder())
    assert docs["gt_box"] == hub["gt_box"] and docs["expression"] == hub["expression"]
    vrh_env.setenv("VRH_SYNTH_REFER_ROOT", str(layouts["refer"]))
    assert len(GD.vrh_synth_grounding_refer(placeholder())) == SPLITS["test"][1]


def test_bad_synth_config(vrh_env, placeholder):
    vrh_env.setenv("VRH_SYNTH_CONFIG", '{"n": 4, "scene": {"colour_count": 3}}')
    with pytest.raises(SourceError, match="colour_count"):
        GD.vrh_synth_grounding(placeholder())
    vrh_env.setenv("VRH_SYNTH_CONFIG", "{not json")
    with pytest.raises(SourceError, match="VRH_SYNTH_CONFIG"):
        GD.vrh_synth_grounding(placeholder())


# ------------------------------------------------------------------------------------------ Toloka
def test_toloka_local_csv(vrh_env, placeholder, tmp_path):
    root = tmp_path / "toloka"
    (root / "images").mkdir(parents=True)
    lines = ["image,width,height,left,top,right,bottom,question"]
    for i, scene in enumerate(generate_scenes(3, seed=4)):
        name = f"{i:012d}.jpg"
        scene.image.save(root / "images" / name)
        x, y, w, h = scene.target_object.bbox
        lines.append(f"https://example.invalid/wsdm/{name},224,224,{x:.0f},{y:.0f},{x + w:.0f},{y + h:.0f},"
                     f"Where is {scene.expression}")
    (root / "test_public.csv").write_text("\n".join(lines) + "\n")
    vrh_env.setenv("VRH_TOLOKA_ROOT", str(root))
    docs = GD.vrh_toloka(placeholder())
    # the same CSV read as hub-schema files, images mapped by file name
    vrh_env.delenv("VRH_TOLOKA_ROOT")
    vrh_env.setenv("VRH_TOLOKA_DATA", str(root))
    vrh_env.setenv("VRH_TOLOKA_IMAGES", str(root / "images"))
    assert GD.vrh_toloka(placeholder())["gt_box"] == docs["gt_box"]
    assert len(docs) == 3 and docs[1]["image_id"] == "000000000001" and docs[1]["image"].size == (224, 224)
    vrh_env.setenv(context.ENV_VAR, "qwen3_vl")
    assert G.question_doc_to_text(docs[0]) == get_convention("qwen3_vl").prompt(
        f'the object that answers the question "{docs[0]["expression"]}?"')
    out = G.process_results(docs[0], ["nothing"])
    assert out["vrh_record"]["status"] == "parse_failure"


# ------------------------------------------------------------------------------------------ RefSpatial
def test_refspatial_raw_layout_and_point_scoring(vrh_env, placeholder, tmp_path):
    root = tmp_path / "RefSpatial-Bench" / "Location"
    (root / "image").mkdir(parents=True)
    (root / "mask").mkdir()
    Image.new("RGB", (200, 100), (90, 90, 90)).save(root / "image" / "0.png")
    mask = np.zeros((100, 200), np.uint8)
    mask[20:40, 100:150] = 255
    Image.fromarray(mask).save(root / "mask" / "0.png")
    (root / "question.json").write_text(json.dumps([{"id": 0, "object": "the free space right of the cup",
                                                     "prompt": "Point to the free space.", "suffix": "",
                                                     "rgb_path": "image/0.png", "mask_path": "mask/0.png",
                                                     "step": 2}]))
    vrh_env.setenv("VRH_REFSPATIAL_ROOT", str(tmp_path / "RefSpatial-Bench"))
    vrh_env.setenv(context.ENV_VAR, "qwen3_vl")
    docs = GD.vrh_refspatial_location(placeholder())
    doc = docs[0]
    assert doc["expression"] == "the free space right of the cup" and doc["image_id"] == "0"
    assert G.point_doc_to_text(doc) == get_convention("qwen3_vl").pointing_prompt(doc["expression"])
    inside = G.point_process_results(doc, ['[{"point_2d": [625, 300]}]'])  # x=125, y=30: in the mask
    assert inside["acc"] == 1.0 and inside["vrh_record"]["kind"] == "pointing"
    assert inside["vrh_record"]["status"] == "correct"
    half = G.point_process_results(doc, ['[{"point_2d": [625, 300]}, {"point_2d": [10, 10]}]'])
    assert half["acc"] == 0.5
    outside = G.point_process_results(doc, ['{"point_2d": [100, 900]}'])
    assert outside["acc"] == 0.0 and outside["mislocated"] == 1.0
    none = G.point_process_results(doc, ["no idea"])
    assert none["parse_failure"] == 1.0 and none["vrh_record"]["status"] == "parse_failure"


def test_refspatial_hub_schema_files(vrh_env, placeholder, tmp_path):
    import datasets

    mask = np.zeros((50, 80), np.uint8)
    mask[10:20, 10:20] = 255
    rows = [{"id": 4, "image": Image.new("RGB", (80, 50)), "mask": Image.fromarray(mask), "object": "the spot",
             "prompt": "Point to the spot.", "suffix": "Answer with [(x, y)].", "step": 1}]
    ds = datasets.Dataset.from_list(rows).cast_column("image", datasets.Image()).cast_column("mask", datasets.Image())
    ds.to_parquet(str(tmp_path / "placement.parquet"))
    vrh_env.setenv("VRH_REFSPATIAL_DATA", str(tmp_path))
    vrh_env.setenv(context.ENV_VAR, "generic")
    doc = GD.vrh_refspatial_placement(placeholder())[0]
    assert doc["image_id"] == "4" and doc["expression"] == "the spot"
    assert G.point_process_results(doc, ["[(0.19, 0.3)]"])["acc"] == 1.0


def test_uncached_hub_dataset_offline_is_a_clear_error(vrh_env, placeholder):
    vrh_env.setenv("VRH_REFCOCO_HUB", "vrh-test/not-cached")
    with pytest.raises(SourceError, match=r"could not load hub dataset 'vrh-test/not-cached'.*VRH_REFCOCO_HUB"):
        GD.vrh_refcoco_testA(placeholder())
