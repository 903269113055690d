"""Local copies of the seven vrh_vqa_paper sources in their published schemas and snapshot layouts, each holding
rows the paper's subset keeps and rows it must drop. Returns the VRH_* settings that point the tasks at them.

Schemas (fields, types, nesting, split names, file layout) and where they come from:
- VAW: adobe-research/vaw_dataset ``data/test.json`` (README example instance: string ids, bbox [x, y, w, h]) and
  the real type files (tests/fixtures/real_excerpts); Visual Genome images ``<image_id>.jpg``.
- Spatial457: lmms-lab-eval/Spatial457 snapshot, one folder per config, ``<config>/test-0000k-of-0000N.parquet``;
  columns of RyanWW/Spatial457's ``Spatial457.py`` (image, image_filename, question, answer, question_index,
  program).
- SpatialRGPT-Bench: a8cheng/SpatialRGPT-Bench parquet, split ``val`` under ``data/``, nested fields stored as
  ``str(obj)`` literals; ``qa_info`` categories from SpatialRGPT's ``evaluate_spatial_with_gpt4.py``.
- CV-Bench: nyu-visionx/CV-Bench files ``test.parquet`` (config default) beside ``test_2d.parquet`` /
  ``test_3d.parquet``; lmms-eval ``cv_bench`` doc fields (answer ``(A)``, ``prompt``, ``source``).
- MMStar: Lin-Chen/MMStar split ``val`` (index, question with inline options, image, answer letter, category,
  l2_category, meta_info).
- CountBenchQA: vikhyatk/CountBenchQA ``data/test-00000-of-00001.parquet`` (image, text, question, number int32).
- MathVista: AI4Math/MathVista card features, ``data/testmini-00000-of-00001.parquet`` (``decoded_image``, ``choices``
  None for free-form, ``question_type`` multi_choice / free_form, ``metadata`` struct).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from PIL import Image

REAL = Path(__file__).parents[1] / "fixtures" / "real_excerpts"

# rows each subset must keep, by task (the rest of each fixture must be dropped)
KEPT = {
    "vrh_vqa_paper_vaw_mc": ["2370001001:mc", "2370002002:mc"],
    "vrh_vqa_paper_spatial457_l1_single": ["0", "1"],
    "vrh_vqa_paper_spatialrgpt_object_size": ["w1", "h1", "w2"],
    "vrh_vqa_paper_cv_bench": ["0", "1", "2"],
    "vrh_vqa_paper_mmstar": ["1", "2"],
    "vrh_vqa_paper_countbenchqa": ["0", "1"],
    "vrh_vqa_paper_mathvista_mcq": ["1", "5"],
}


def _img(size: tuple[int, int] = (64, 48), color: tuple[int, int, int] = (90, 90, 90)) -> Image.Image:
    return Image.new("RGB", size, color)


def parquet(path: Path, rows: list[dict[str, Any]], image_cols: tuple[str, ...] = ("image",)) -> Path:
    import datasets

    ds = datasets.Dataset.from_list(rows)
    for c in image_cols:
        ds = ds.cast_column(c, datasets.Image())
    path.parent.mkdir(parents=True, exist_ok=True)
    ds.to_parquet(str(path))
    return path


def vaw(root: Path) -> dict[str, str]:
    data, images = root / "vaw_dataset" / "data", root / "VG_100K"
    data.mkdir(parents=True)
    images.mkdir()
    readme = json.loads((REAL / "vaw_readme_instance.json").read_text())  # 1 color negative: dropped

    def inst(i: int, pos: list[str], neg: list[str]) -> dict[str, Any]:
        return {"image_id": str(2370000 + i), "instance_id": f"{2370000 + i}00{i}",
                "instance_bbox": [4.0, 6.0, 20.0, 16.0], "instance_polygon": None, "object_name": "shirt",
                "positive_attributes": pos, "negative_attributes": neg}

    rows = [readme,
            inst(1, ["red", "striped"], ["blue", "green", "yellow", "wet"]),  # color question
            inst(2, ["wooden"], ["metal", "plastic", "glass", "red"]),  # material question
            inst(3, ["running"], ["walking", "sitting", "standing"]),  # action: not a paper type
            inst(4, ["red"], ["blue", "green"])]  # two color negatives: too few
    (data / "test.json").write_text(json.dumps(rows))
    for name in ("attribute_types.json", "attribute_parent_types.json"):
        shutil.copy(REAL / f"vaw_{name}", data / name)
    for r in rows:
        _img((80, 60)).save(images / f"{r['image_id']}.jpg")
    return {"VRH_VAW_ROOT": str(root / "vaw_dataset"), "VRH_VAW_IMAGES": str(images)}


def spatial457(root: Path) -> dict[str, str]:
    snap = root / "Spatial457"
    program = [{"type": "scene", "inputs": [], "_output": None, "value_inputs": []}]

    def rows(qa: list[tuple[str, str]]) -> list[dict[str, Any]]:
        return [{"image": _img(), "image_filename": f"superCLEVR_new_{i:06d}.png", "question": q, "answer": a,
                 "question_index": i, "program": program} for i, (q, a) in enumerate(qa)]

    parquet(snap / "L1_single" / "test-00000-of-00001.parquet",
            rows([("Is there a red bus?", "True"), ("What color is the bike?", "blue")]))
    parquet(snap / "L2_objects" / "test-00000-of-00001.parquet",
            rows([("How many cars?", "2"), ("Is the bus left of the car?", "False"), ("What shape?", "cube")]))
    return {"VRH_SPATIAL457_DATA": str(snap)}


def spatialrgpt(root: Path) -> dict[str, str]:
    snap = root / "SpatialRGPT-Bench"
    base = {"image_info": str({"file_path": "SUNRGBD/kv2/kinect2data/000065/image/0000103.jpg", "height": 48,
                               "width": 64}),
            "bbox": str([[4.0, 4.0, 20.0, 20.0], [30.0, 10.0, 60.0, 40.0]]), "rle": str([])}

    def row(rid: str, kind: str, category: str, q: str, a: str) -> dict[str, Any]:
        return {**base, "id": rid, "image": _img(), "text_q": q, "qa_info": str({"type": kind, "category": category}),
                "conversations": str([{"from": "human", "value": "<image>\n" + q.replace("Region [0]", "<mask>")},
                                      {"from": "gpt", "value": a}])}

    rows = [row("w1", "quantitative", "width_data", "How wide is Region [0]?", "Region [0] is 1.2 meters wide."),
            row("d1", "quantitative", "distance_data", "How far is Region [0] from Region [1]?", "2 meters."),
            row("h1", "quantitative", "height_data", "How tall is Region [0]?", "It is 80 centimeters tall."),
            row("q1", "qualitative", "tall_predicate", "Is Region [0] taller than Region [1]?", "Yes."),
            row("c1", "quantitative", "direction", "Where is Region [1] from Region [0]?", "At 3 o'clock."),
            row("q2", "qualitative", "wide_choice", "Which is wider, Region [0] or Region [1]?", "Region [1]."),
            row("w2", "quantitative", "width_data", "What is the width of Region [1]?", "3 feet."),
            row("v1", "quantitative", "vertical_distance_data", "How far apart vertically?", "0.5 meters.")]
    parquet(snap / "data" / "val-00000-of-00001.parquet", rows)
    return {"VRH_SPATIALRGPT_DATA": str(snap)}


def cv_bench(root: Path) -> dict[str, str]:
    folder = root / "CV-Bench"

    def row(i: int, kind: str, source: str) -> dict[str, Any]:
        return {"idx": i, "type": kind, "task": "Count" if kind == "2D" else "Depth", "image": _img(),
                "question": "How many chairs?", "choices": ["1", "2", "3"], "answer": "(B)",
                "prompt": "How many chairs?\n(A) 1\n(B) 2\n(C) 3", "filename": f"img/{kind}/x/{i}.png",
                "source": source, "source_dataset": source, "source_filename": f"{i}.jpg", "target_class": "chair",
                "target_size": 100, "bbox": [1.0, 2.0, 3.0, 4.0]}

    parquet(folder / "test.parquet", [row(0, "2D", "ADE20K"), row(1, "2D", "COCO"), row(2, "3D", "Omni3D")])
    parquet(folder / "test_2d.parquet", [row(10, "2D", "ADE20K"), row(11, "2D", "COCO")])
    parquet(folder / "test_3d.parquet", [row(12, "3D", "Omni3D")])
    return {"VRH_CV_BENCH_DATA": str(folder)}


def mmstar(root: Path) -> dict[str, str]:
    folder = root / "MMStar"
    rows = [{"index": i, "question": "Which animal?\nOptions: A: cat, B: dog, C: cow, D: fox", "image": _img(),
             "answer": "AB"[i - 1], "category": "coarse perception", "l2_category": "image topic",
             "meta_info": {"source": "MMBench", "split": "val", "image_path": f"{i}.jpg"}} for i in (1, 2)]
    parquet(folder / "val.parquet", rows)
    return {"VRH_MMSTAR_DATA": str(folder)}


def countbench(root: Path) -> dict[str, str]:
    folder = root / "CountBenchQA"
    rows = [{"image": _img(), "text": "Three cats on a sofa", "question": "How many cats are there?", "number": 3},
            {"image": _img(), "text": "Five apples", "question": "How many apples are there?", "number": 5}]
    parquet(folder / "data" / "test-00000-of-00001.parquet", rows)
    return {"VRH_COUNTBENCH_DATA": str(folder)}


def mathvista(root: Path) -> dict[str, str]:
    folder = root / "MathVista"
    meta = {"category": "math-targeted-vqa", "context": "synthetic scene", "grade": "daily life", "img_height": 48,
            "img_width": 64, "language": "english", "skills": ["arithmetic reasoning"], "source": "CLEVR-Math",
            "split": "testmini", "task": "math word problem"}

    def row(pid: str, qtype: str, atype: str, answer: str, choices: list[str] | None) -> dict[str, Any]:
        return {"pid": pid, "question": f"Question {pid}?", "image": f"images/{pid}.jpg", "decoded_image": _img(),
                "choices": choices, "unit": None, "precision": 1.0 if atype == "float" else None, "answer": answer,
                "question_type": qtype, "answer_type": atype, "metadata": meta, "query": f"Hint: ...\nQuestion {pid}?"}

    rows = [row("1", "multi_choice", "text", "the ball", ["the cube", "the ball"]),
            row("2", "free_form", "integer", "6", None),
            row("3", "free_form", "float", "2.5", None),
            row("5", "multi_choice", "text", "4", ["2", "4", "6", "8"]),
            row("8", "free_form", "list", "[1, 2]", None)]
    parquet(folder / "data" / "testmini-00000-of-00001.parquet", rows, ("decoded_image",))
    return {"VRH_MATHVISTA_DATA": str(folder)}


def write_all(root: Path) -> dict[str, str]:
    """All seven sources under ``root``; the VRH_* settings that select them."""
    env: dict[str, str] = {}
    for make in (vaw, spatial457, spatialrgpt, cv_bench, mmstar, countbench, mathvista):
        env.update(make(root))
    return env
