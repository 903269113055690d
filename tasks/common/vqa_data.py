"""VQA benchmarks: sources and the columns every vrh VQA doc gets, plus one process_docs per task.

Docs keep their benchmark's own columns and gain: ``vrh_prompt`` (the full question text), ``vrh_target``,
``vrh_answer_type`` (how ``vqa.process_results`` reads the reply), ``vrh_options`` (choice texts, may be empty),
``vrh_question_type`` (breakdown key), ``vrh_meta`` (JSON: precision, boxes to draw, ...), ``image_id``,
``question_id`` and ``vrh_key``. The image is ``image`` (``decoded_image`` for MathVista).
"""

from __future__ import annotations

import ast
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vrh_lmms.base.boxes.geometry import xywh_to_xyxy
from vrh_lmms.tasks.common import docs as D
from vrh_lmms.tasks.common.sources import Source, SourceError, load_rows, resolve, resolve_image_path, spec_row

LETTERS = "ABCDEFGHIJ"
MC_SUFFIX = "\nAnswer with the option's letter from the given choices directly."
SHORT_SUFFIX = "\nAnswer the question using a single word or number."
COUNT_SUFFIX = "\nAnswer with a single number."
YES_NO_SUFFIX = " Answer yes or no."


@dataclass(frozen=True)
class VQABench:
    key: str
    default: Source
    local_kind: str | None
    allowed: tuple[str, ...]
    adapt: Callable[..., Any]  # (rows in hub schema, split, origin, options) -> docs
    from_local: Callable[[Source, str], Any] | None = None


def add_columns(rows, columns: dict[str, list]):
    """Append per-doc columns (cheap: no image is decoded or copied)."""
    for name, values in columns.items():
        if name in rows.column_names:
            rows = rows.remove_columns(name)
        rows = rows.add_column(name, values)
    return rows


def vqa_columns(n: int) -> dict[str, list]:
    return {k: [] for k in ("vrh_prompt", "vrh_target", "vrh_answer_type", "vrh_options", "vrh_question_type",
                            "vrh_meta", "image_id", "question_id")}


def _push(cols: dict[str, list], *, prompt: str, target: Any, answer_type: str, options: Sequence[str] = (),
          question_type: str = "", meta: dict | None = None, image_id: Any, question_id: Any) -> None:
    cols["vrh_prompt"].append(prompt)
    cols["vrh_target"].append(str(target))
    cols["vrh_answer_type"].append(answer_type)
    cols["vrh_options"].append([str(o) for o in options])
    cols["vrh_question_type"].append(str(question_type))
    cols["vrh_meta"].append(json.dumps(meta or {}))
    cols["image_id"].append(str(image_id))
    cols["question_id"].append(str(question_id))


def _meta_rows(rows, exclude: Sequence[str] = ("image", "decoded_image")) -> list[dict[str, Any]]:
    return rows.select_columns([c for c in rows.column_names if c not in exclude]).to_list()


# ------------------------------------------------------------------------------------------------ MMStar
def mmstar_adapt(rows, split: str, origin: str, options: dict | None = None):
    D.require_columns(rows, ("image", "question", "answer"), origin)
    cols = vqa_columns(len(rows))
    for i, r in enumerate(_meta_rows(rows)):
        _push(cols, prompt=str(r["question"]).strip() + MC_SUFFIX, target=str(r["answer"]).strip().upper(),
              answer_type="choice", options=(), question_type=r.get("category", ""),
              meta={"letters": "ABCD", "l2_category": r.get("l2_category")}, image_id=r.get("index", i),
              question_id=r.get("index", i))
    return add_columns(rows, cols)


# ------------------------------------------------------------------------------------------------ CV-Bench
def cv_bench_adapt(rows, split: str, origin: str, options: dict | None = None):
    D.require_columns(rows, ("image", "choices", "answer", "prompt"), origin)
    cols = vqa_columns(len(rows))
    for i, r in enumerate(_meta_rows(rows)):
        letters = LETTERS[: len(r["choices"])]
        note = f"Note: You only need to respond with {', '.join(letters)} without providing any additional " \
               f"information.\n\n"
        _push(cols, prompt=note + str(r["prompt"]), target=str(r["answer"]).strip().strip("()").upper(),
              answer_type="choice", options=r["choices"], question_type=f"{r.get('type', '')}_{r.get('task', '')}",
              meta={"letters": letters, "source": r.get("source")}, image_id=r.get("filename") or r.get("idx", i),
              question_id=r.get("idx", i))
    return add_columns(rows, cols)


# ------------------------------------------------------------------------------------------------ Spatial457
def spatial457_adapt(rows, split: str, origin: str, options: dict | None = None):
    D.require_columns(rows, ("image", "question", "answer"), origin)
    cols = vqa_columns(len(rows))
    level = (options or {}).get("level", "")
    for i, r in enumerate(_meta_rows(rows, exclude=("image", "program"))):
        _push(cols, prompt=str(r["question"]).strip() + SHORT_SUFFIX, target=r["answer"], answer_type="short",
              question_type=level, image_id=r.get("image_filename", i), question_id=r.get("question_index", i))
    return add_columns(rows, cols)


# ------------------------------------------------------------------------------------------------ CountBenchQA
def countbench_adapt(rows, split: str, origin: str, options: dict | None = None):
    """Question only: lmms-eval's countbenchqa prepends doc['text'], the caption that states the count."""
    D.require_columns(rows, ("image", "question", "number"), origin)
    cols = vqa_columns(len(rows))
    for i, r in enumerate(_meta_rows(rows)):
        _push(cols, prompt=str(r["question"]).strip() + COUNT_SUFFIX, target=int(r["number"]), answer_type="number",
              question_type="count", image_id=i, question_id=i)
    return add_columns(rows, cols)


# ------------------------------------------------------------------------------------------------ MathVista
def mathvista_prompt(r: dict[str, Any]) -> str:
    """lmms-eval's 'format-prompt' query: question (+unit), lettered choices, a one-line answer-format hint."""
    text = str(r["question"]).strip()
    if r.get("unit"):
        text += f" (Unit: {r['unit']})"
    parts = [text]
    if r.get("choices"):
        parts.append("\n".join(f"{LETTERS[i]}. {c}" for i, c in enumerate(r["choices"])))
    qtype, atype, precision = r.get("question_type"), r.get("answer_type"), r.get("precision")
    if qtype == "multi_choice":
        parts.append("Answer with the option's letter from the given choices directly.")
    elif atype == "integer":
        parts.append("Answer the question using a single integer number.")
    elif atype == "float" and precision == 1:
        parts.append("Answer the question using a single floating-point number with one decimal place.")
    elif atype == "float" and precision == 2:
        parts.append("Answer the question using a single floating-point number with two decimal places.")
    elif atype == "float":
        parts.append("Answer the question using a single floating-point number.")
    elif atype == "list":
        parts.append("Answer the question using a Python list.")
    return "\n".join(parts)


def mathvista_adapt(rows, split: str, origin: str, options: dict | None = None):
    D.require_columns(rows, ("decoded_image", "question", "question_type", "answer_type"), origin)
    cols = vqa_columns(len(rows))
    for i, r in enumerate(_meta_rows(rows)):
        choices = list(r.get("choices") or [])
        _push(cols, prompt=mathvista_prompt(r), target=r.get("answer") or "", answer_type="mathvista",
              options=choices, question_type=f"{r['question_type']}:{r['answer_type']}",
              meta={"question_type": r["question_type"], "answer_type": r["answer_type"],
                    "precision": r.get("precision"), "letters": LETTERS[: len(choices)]},
              image_id=r.get("pid", i), question_id=r.get("pid", i))
    return add_columns(rows, cols)


# ------------------------------------------------------------------------------------------------ VAW
VAW_MODES = ("box", "crop")


VAW_TYPE_FILES = ("attribute_types.json", "attribute_parent_types.json")


@dataclass(frozen=True)
class VAWTypes:
    """VAW's attribute taxonomy: ``attribute_types.json`` maps a subtype to its attributes, and
    ``attribute_parent_types.json`` a parent type (color, material, ...) to its subtypes; ``head_tail.json``
    (optional) maps head/medium/tail to attributes."""

    subtypes: dict[str, list[str]]
    parents: dict[str, list[str]]
    head_tail: dict[str, list[str]] | None = None

    def of(self, attr: str) -> tuple[str, str]:
        """(parent type, subtype) as the official evaluator's ``get_attr_type`` finds them: the first subtype (in
        file order) listing the attribute, then the first parent listing that subtype; 'other' when none does."""
        sub = next((name for name, attrs in self.subtypes.items() if attr in attrs), "other")
        parent = next((name for name, subs in self.parents.items() if sub in subs), "other")
        return parent, sub

    def group(self, attr: str) -> str | None:
        if not self.head_tail:
            return None
        return next((name for name, attrs in self.head_tail.items() if attr in attrs), None)


def vaw_types(data_dir: Path, origin: str) -> VAWTypes:
    missing = [n for n in VAW_TYPE_FILES if not (data_dir / n).is_file()]
    if missing:
        raise SourceError(f"{origin}: {', '.join(str(data_dir / n) for n in missing)} missing (adobe-research/"
                          f"vaw_dataset ships them in data/; the parent types of the questions come from them)")
    def read(name: str):
        return json.loads((data_dir / name).read_text())

    head_tail = read("head_tail.json") if (data_dir / "head_tail.json").is_file() else None
    return VAWTypes(read(VAW_TYPE_FILES[0]), read(VAW_TYPE_FILES[1]), head_tail)


@dataclass(frozen=True)
class VAWInputs:
    """Where one VAW split's files are: the instances JSON, the Visual Genome image folders, the taxonomy, and the
    display mode (``box`` or ``crop``)."""

    path: Path
    folders: list[Path]
    types: VAWTypes
    mode: str
    origin: str

    def instances(self) -> list[dict[str, Any]]:
        return json.loads(self.path.read_text())

    def image(self, image_id: Any) -> Path:
        name = f"{image_id}.jpg"
        img = resolve_image_path(name, self.folders)
        if img is None:
            raise SourceError(f"{self.origin}: Visual Genome image {name} not found in "
                              f"{', '.join(map(str, self.folders))}")
        return img


def vaw_inputs(source: Source, split: str) -> VAWInputs:
    """VAW's files for ``split`` under ``VRH_VAW_ROOT`` (adobe-research/vaw_dataset), with clear errors."""
    root = Path(source.require("root", "set VRH_VAW_ROOT to the vaw_dataset folder (holding data/<split>.json)"))
    root = root.expanduser()
    data_dir = root / "data" if (root / "data").is_dir() else root
    path = data_dir / f"{split}.json"
    if not path.is_file():
        raise SourceError(f"{source.origin}: {path} is missing (VAW ships data/train_part1.json, val.json, test.json)")
    mode = str(source.get("mode") or os.environ.get("VRH_VAW_MODE") or "box")
    if mode not in VAW_MODES:
        raise SourceError(f"VRH_VAW_MODE={mode!r}: use one of {', '.join(VAW_MODES)}")
    images = source.get("images")
    folders = [Path(images).expanduser()] if images else []
    folders += [root / d for d in ("images", "VG_100K", "VG_100K_2", "images/VG_100K", "images/VG_100K_2")]
    folders = [f for f in folders if f.is_dir()]
    if not folders:
        raise SourceError(f"{source.origin}: no Visual Genome image folder; set VRH_VAW_IMAGES")
    return VAWInputs(path, folders, vaw_types(data_dir, source.origin), mode, source.origin)


def vaw_local(source: Source, split: str):
    """Yes/no questions from VAW's JSON (adobe-research/vaw_dataset) over Visual Genome images.

    Each labelled (instance, attribute) pair becomes one question, "yes" for positive and "no" for negative
    attributes. Mode ``box`` (default) shows the whole image with the instance outlined in red; ``crop`` shows the
    instance's box only (set by ``VRH_VAW_MODE`` or the spec's ``mode``).
    """
    vaw = vaw_inputs(source, split)
    types, mode = vaw.types, vaw.mode
    records = []
    for inst in vaw.instances():
        img = vaw.image(inst["image_id"])
        box = xywh_to_xyxy(inst["instance_bbox"])
        obj = str(inst["object_name"]).strip()
        where = "in the red box " if mode == "box" else ""
        for polarity, attrs in (("positive", inst.get("positive_attributes") or []),
                                ("negative", inst.get("negative_attributes") or [])):
            for attr in attrs:
                parent, subtype = types.of(attr)
                records.append({
                    "image": str(img), "vrh_prompt": f"Is the {obj} {where}{attr}?{YES_NO_SUFFIX}",
                    "vrh_target": "yes" if polarity == "positive" else "no", "vrh_answer_type": "yes_no",
                    "vrh_options": [], "vrh_question_type": parent,
                    "vrh_meta": json.dumps({"draw_boxes": [box] if mode == "box" else [],
                                            "crop": box if mode == "crop" else None, "attribute": attr,
                                            "polarity": polarity, "object": obj, "attribute_type": subtype,
                                            "parent_type": parent, "instance_id": str(inst["instance_id"]),
                                            **({"head_tail": types.group(attr)} if types.head_tail else {})}),
                    "image_id": str(inst["image_id"]), "question_id": f"{inst['instance_id']}:{attr}",
                })
    return D.from_records(records)


# ------------------------------------------------------------------------------------------------ SpatialRGPT
def nested(value: Any) -> Any:
    """A nested field that may be stored as text: JSON, or a Python literal (the SpatialRGPT-Bench parquet stores
    ``conversations``, ``qa_info``, ``bbox``, ``image_info``, ``rle`` as ``str(obj)``, single quotes and all,
    which public loaders read with ``ast.literal_eval``)."""
    if not isinstance(value, str) or value.strip()[:1] not in ("[", "{", "("):
        return value
    try:
        return json.loads(value)
    except ValueError:
        pass
    try:
        return ast.literal_eval(value.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value


def _nested_field(r: dict[str, Any], key: str, kind: type, origin: str) -> Any:
    value = nested(r.get(key))
    if value is None or value == "":
        return kind()
    if not isinstance(value, kind):
        raise SourceError(f"{origin}: record {r.get('id')!r} field {key!r} is not a {kind.__name__} "
                          f"(got {str(value)[:60]!r})")
    return value


def spatialrgpt_fields(r: dict[str, Any], origin: str = "SpatialRGPT-Bench") -> dict[str, Any]:
    """Prompt, target and scoring info of one SpatialRGPT-Bench record (original JSON or hub row)."""
    conv = _nested_field(r, "conversations", list, origin)
    qa = _nested_field(r, "qa_info", dict, origin)
    boxes = _nested_field(r, "bbox", list, origin)
    question = str(r.get("text_q") or (conv[0]["value"] if conv else "")).replace("<image>", "").strip()
    k = 0
    while "<mask>" in question:
        question = question.replace("<mask>", f"Region [{k}]", 1)
        k += 1
    question = question.replace("<depth>", "").strip()
    answer = str(conv[1]["value"]).strip() if len(conv) > 1 else str(r.get("answer", ""))
    qa_type = str(qa.get("type", "")).lower()
    category = str(qa.get("category", ""))
    hint = " Answer with a number and a unit." if qa_type == "quantitative" else " Answer the question briefly."
    if category == "direction":
        hint = " Answer with a clock direction, such as 3 o'clock."
    return {"prompt": "The regions are outlined and labelled in the image. " + question + hint, "target": answer,
            "qa_type": qa_type, "category": category, "boxes": [list(map(float, b)) for b in boxes]}


def spatialrgpt_records(rows: list[dict[str, Any]], folders: list[Path], origin: str,
                        with_image_paths: bool) -> list[dict[str, Any]]:
    out = []
    for i, r in enumerate(rows):
        f = spatialrgpt_fields(r, origin)
        info = _nested_field(r, "image_info", dict, origin)
        rec = {"vrh_prompt": f["prompt"], "vrh_target": f["target"], "vrh_answer_type": "spatialrgpt",
               "vrh_options": [], "vrh_question_type": f["category"],
               "vrh_meta": json.dumps({"draw_boxes": f["boxes"], "labels": True, "qa_type": f["qa_type"],
                                       "category": f["category"]}),
               "image_id": str(info.get("file_path") or r.get("id", i)), "question_id": str(r.get("id", i))}
        if with_image_paths:
            path = resolve_image_path(str(info.get("file_path", "")), folders) if info.get("file_path") else None
            if path is None:
                raise SourceError(f"{origin}: image {info.get('file_path')!r} of record {r.get('id', i)} not found "
                                  f"in {', '.join(map(str, folders)) or 'any folder'}; set VRH_SPATIALRGPT_IMAGES")
            rec["image"] = str(path)
        out.append(rec)
    return out


def spatialrgpt_adapt(rows, split: str, origin: str, options: dict | None = None):
    images = (options or {}).get("images")
    if "image" in rows.column_names:
        recs = spatialrgpt_records(_meta_rows(rows), [], origin, with_image_paths=False)
        return D.repeat_with(rows, range(len(rows)), {k: [r[k] for r in recs] for k in recs[0]})
    folders = [Path(images).expanduser()] if images else []
    return D.from_records(spatialrgpt_records(rows.to_list(), folders, origin, with_image_paths=True))


def spatialrgpt_local(source: Source, split: str):
    root = Path(source.require("root", "the folder holding SpatialRGPT-Bench_v1.json")).expanduser()
    path = root / "SpatialRGPT-Bench_v1.json" if root.is_dir() else root
    if not path.is_file():
        raise SourceError(f"{source.origin}: {path} is missing")
    base = path.parent
    folders = [Path(p).expanduser() for p in (source.get("images"),) if p] + [base, base / "images", base.parent]
    folders = [f for f in folders if f.is_dir()]
    return D.from_records(spatialrgpt_records(json.loads(path.read_text()), folders, source.origin, True))


# ------------------------------------------------------------------------------------------------ registry
def _no_rows(name: str) -> Callable[..., Any]:
    def adapt(rows, split, origin, options=None):
        raise SourceError(f"{origin}: {name} has no hub schema; use its local layout (docs/tasks.md)")

    return adapt


def _hub(path: str, name: str | None = None) -> Source:
    return Source("hub", {"path": path, "name": name} if name else {"path": path})


SPATIAL457_LEVELS = ("L1_single", "L2_objects", "L3_2d_spatial", "L4_occ", "L4_pose", "L5_6d_spatial",
                     "L5_collision")
VQA_BENCHMARKS: dict[str, VQABench] = {
    "mmstar": VQABench("MMSTAR", _hub("Lin-Chen/MMStar"), None, ("hub", "files"), mmstar_adapt),
    "cv_bench": VQABench("CV_BENCH", _hub("nyu-visionx/CV-Bench", "default"), None, ("hub", "files"), cv_bench_adapt),
    "cv_bench_2d": VQABench("CV_BENCH", _hub("nyu-visionx/CV-Bench", "2D"), None, ("hub", "files"), cv_bench_adapt),
    "cv_bench_3d": VQABench("CV_BENCH", _hub("nyu-visionx/CV-Bench", "3D"), None, ("hub", "files"), cv_bench_adapt),
    "countbenchqa": VQABench("COUNTBENCH", _hub("vikhyatk/CountBenchQA"), None, ("hub", "files"), countbench_adapt),
    "mathvista": VQABench("MATHVISTA", _hub("AI4Math/MathVista"), None, ("hub", "files"), mathvista_adapt),
    "vaw": VQABench("VAW", Source("raw", {}), "raw", ("raw",), _no_rows("VAW"), vaw_local),
    "spatialrgpt": VQABench("SPATIALRGPT", _hub("a8cheng/SpatialRGPT-Bench"), "raw", ("hub", "files", "raw"),
                            spatialrgpt_adapt, spatialrgpt_local),
    **{f"spatial457_{lvl.lower()}": VQABench("SPATIAL457", _hub("lmms-lab-eval/Spatial457", lvl), None,
                                             ("hub", "files"), spatial457_adapt) for lvl in SPATIAL457_LEVELS},
}


def load_vqa_docs(benchmark: str, split: str, task: str, dataset=None):
    bench = VQA_BENCHMARKS[benchmark]
    options_extra = {"level": bench.default.get("name")} if benchmark.startswith("spatial457_") else {}
    spec = spec_row(dataset)
    if spec is None and dataset is not None:
        return D.with_keys(bench.adapt(dataset, split, f"task {task}'s dataset_path", options_extra), task)
    source = resolve(bench.key, spec, bench.default, bench.local_kind, bench.allowed)
    if source.kind in ("hub", "files"):
        rows = load_rows(source, split)
        docs = bench.adapt(rows, split, source.origin, {**dict(source.options), **options_extra})
    else:
        docs = bench.from_local(source, split)
    return D.with_keys(docs, task)


def loader(benchmark: str, split: str, task: str) -> Callable[[Any], Any]:
    def process_docs(dataset):
        return load_vqa_docs(benchmark, split, task, dataset)

    process_docs.__name__ = process_docs.__qualname__ = task
    process_docs.__doc__ = f"Docs of {task}: {benchmark} split {split!r}."
    return process_docs


TASK_SPLITS = {
    "vrh_mmstar": ("mmstar", "val"), "vrh_cv_bench": ("cv_bench", "test"), "vrh_cv_bench_2d": ("cv_bench_2d", "test"),
    "vrh_cv_bench_3d": ("cv_bench_3d", "test"), "vrh_countbenchqa": ("countbenchqa", "test"),
    "vrh_mathvista_testmini": ("mathvista", "testmini"), "vrh_vaw": ("vaw", "test"),
    "vrh_spatialrgpt": ("spatialrgpt", "val"),
    **{f"vrh_spatial457_{lvl.lower()}": (f"spatial457_{lvl.lower()}", "test") for lvl in SPATIAL457_LEVELS},
}
globals().update({task: loader(bench, split, task) for task, (bench, split) in TASK_SPLITS.items()})
