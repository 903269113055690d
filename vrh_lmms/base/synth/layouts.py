"""Write synthetic scenes in the two on-disk layouts real RefCOCO data comes in.

- hub layout: one parquet file per split with the lmms-lab RefCOCO columns (`question_id`, `image`, `question`,
  `answer`, `segmentation`, `bbox` [x, y, w, h] px, `iscrowd`, `file_name`), plus `image_id`.
- refer layout: `<root>/<dataset>/refs(<split_by>).p` + `<root>/<dataset>/instances.json` (COCO) and the images
  under `<root>/images/`, as lichengunc/refer expects.
"""

from __future__ import annotations

import io
import json
import pickle
from collections.abc import Sequence
from pathlib import Path

from vrh_lmms.base.synth.scenes import (
    Scene,
    SceneConfig,
    box_area,
    expression_for,
    generate_scenes,
    nameable_objects,
    polygon_of,
)

GENERIC_QUESTION = "Please carefully observe the area circled in the image and come up with a caption for the area."


def image_file_name(scene: Scene) -> str:
    return f"synth_{scene.scene_id:08d}.png"


def hub_rows(scenes: Sequence[Scene], all_objects: bool = False) -> list[dict]:
    """Rows in the lmms-lab RefCOCO schema (image as PNG bytes, the `datasets` Image encoding).

    One row per scene (its referent), or with `all_objects` one row per object an expression names uniquely, as
    RefCOCO has one row per annotated object and several objects per image (referent rows keep their question_id).
    """
    rows = []
    for s in scenes:
        buf = io.BytesIO()
        s.image.save(buf, format="PNG")
        for k in nameable_objects(s) if all_objects else [s.target]:
            obj = s.objects[k]
            rows.append(
                {
                    "question_id": str(s.scene_id) if k == s.target else f"{s.scene_id}_{k}",
                    "image": {"bytes": buf.getvalue(), "path": image_file_name(s)},
                    "question": GENERIC_QUESTION,
                    "answer": [expression_for(obj)],
                    "segmentation": polygon_of(obj.bbox),
                    "bbox": list(obj.bbox),
                    "iscrowd": 0,
                    "file_name": image_file_name(s),
                    "image_id": s.scene_id,
                }
            )
    return rows


def write_hub_layout(out_dir: str | Path, splits: dict[str, tuple[int, int]], seed: int = 0,
                     cfg: SceneConfig | None = None, all_objects: bool = False) -> dict[str, Path]:
    """Write `<out_dir>/<split>.parquet` for each split name -> (start scene id, count); see `hub_rows`."""
    # deferred: keeps `the base floor` free of datasets
    import datasets

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    features = datasets.Features(
        {
            "question_id": datasets.Value("string"),
            "image": datasets.Image(),
            "question": datasets.Value("string"),
            "answer": datasets.Sequence(datasets.Value("string")),
            "segmentation": datasets.Sequence(datasets.Value("float32")),
            "bbox": datasets.Sequence(datasets.Value("float32")),
            "iscrowd": datasets.Value("int8"),
            "file_name": datasets.Value("string"),
            "image_id": datasets.Value("int64"),
        }
    )
    paths = {}
    for split, (start, count) in splits.items():
        rows = hub_rows(generate_scenes(count, seed, cfg, start=start), all_objects)
        ds = datasets.Dataset.from_list(rows, features=features)
        paths[split] = out / f"{split}.parquet"
        ds.to_parquet(str(paths[split]))
    return paths


def write_refer_layout(root: str | Path, splits: dict[str, tuple[int, int]], seed: int = 0,
                       cfg: SceneConfig | None = None, dataset: str = "refcoco", split_by: str = "unc") -> Path:
    """Write refer-toolkit files; returns the dataset folder holding `refs(<split_by>).p` and `instances.json`."""
    root = Path(root)
    data_dir = root / dataset
    img_dir = root / "images"
    data_dir.mkdir(parents=True, exist_ok=True)
    img_dir.mkdir(parents=True, exist_ok=True)
    images, annotations, refs = [], [], []
    categories = {}
    sent_id = 0
    for split, (start, count) in splits.items():
        for s in generate_scenes(count, seed, cfg, start=start):
            name = image_file_name(s)
            s.image.save(img_dir / name)
            images.append({"id": s.scene_id, "file_name": name, "width": s.image.width, "height": s.image.height})
            target_ann = None
            for k, obj in enumerate(s.objects):
                cat = categories.setdefault(obj.shape, len(categories) + 1)
                ann_id = s.scene_id * 100 + k
                annotations.append({"id": ann_id, "image_id": s.scene_id, "category_id": cat,
                                    "bbox": list(obj.bbox), "area": box_area(obj.bbox), "iscrowd": 0,
                                    "segmentation": [polygon_of(obj.bbox)]})
                if k == s.target:
                    target_ann = (ann_id, cat)
            ann_id, cat = target_ann
            words = s.expression.split()
            refs.append({"ref_id": s.scene_id, "ann_id": ann_id, "category_id": cat, "image_id": s.scene_id,
                         "split": split, "file_name": f"COCO_synth_{s.scene_id:012d}_{ann_id}.jpg",
                         "sent_ids": [sent_id],
                         "sentences": [{"raw": s.expression, "sent": s.expression, "sent_id": sent_id,
                                        "tokens": words}]})
            sent_id += 1
    instances = {"images": images, "annotations": annotations,
                 "categories": [{"id": i, "name": n, "supercategory": "shape"} for n, i in categories.items()]}
    (data_dir / "instances.json").write_text(json.dumps(instances))
    with open(data_dir / f"refs({split_by}).p", "wb") as f:
        pickle.dump(refs, f, protocol=2)  # the protocol of the official REFER files
    return data_dir


# ------------------------------------------------------------------------------- what `vrh-lmms synth` may replace
def _synthetic_parquet(path: Path) -> bool:
    """A hub-layout parquet `vrh-lmms synth` wrote: every file_name is a synthetic scene's."""
    try:
        # deferred: keeps `vrh-lmms synth --help` free of pyarrow
        import pyarrow.parquet as pq

        names = pq.read_table(path, columns=["file_name"]).column("file_name").to_pylist()
    except Exception:  # not a parquet file, or no file_name column
        return False
    return bool(names) and all(str(n).startswith("synth_") for n in names)


def _synthetic_instances(path: Path) -> bool:
    try:
        images = json.loads(path.read_text())["images"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return bool(images) and all(str(i.get("file_name", "")).startswith("synth_") for i in images)


def check_targets(out_dir: str | Path, layout: str, splits: dict[str, tuple[int, int]], dataset: str = "refcoco",
                  split_by: str = "unc", force: bool = False) -> None:
    """Never overwrite a dataset file `vrh-lmms synth` did not write; its own files only with --force."""
    # deferred: keeps `vrh-lmms synth --help` free of filelock
    from vrh_lmms.base import owned

    out = Path(out_dir)
    if layout == "hub":
        targets = [(out / f"{split}.parquet", _synthetic_parquet) for split in splits]
    else:
        data = out / dataset
        targets = [(data / "instances.json", _synthetic_instances),
                   (data / f"refs({split_by}).p", lambda p: _synthetic_instances(data / "instances.json"))]
    for path, ours in targets:
        owned.prepare_file(path, ours, force=force, what="synthetic data", option="OUT_DIR")
