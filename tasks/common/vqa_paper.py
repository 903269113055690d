"""``vrh_vqa_paper``: the seven VQA sets exactly as the paper's Table 3 uses them, one process_docs per task.

Each task loads its benchmark's docs through ``vqa_data`` (same sources, prompts and scoring as ``vrh_vqa``) and
keeps the paper's subset (``SUBSETS``; the fields a filter reads and where they come from are in docs/tasks.md):

| task | kept rows | paper size |
|---|---|---|
| ``vrh_vqa_paper_vaw_mc`` | VAW built as multiple choice (``vaw_mc``) | 6,309 |
| ``vrh_vqa_paper_spatial457_l1_single`` | config ``L1_single`` (all rows) | 670 |
| ``vrh_vqa_paper_spatialrgpt_object_size`` | quantitative, ``qa_info.category`` width_data/height_data | 266 |
| ``vrh_vqa_paper_cv_bench`` | config ``default`` (all rows) | 2,638 |
| ``vrh_vqa_paper_mmstar`` | split ``val`` (all rows) | 1,500 |
| ``vrh_vqa_paper_countbenchqa`` | split ``test`` (all rows) | 491 |
| ``vrh_vqa_paper_mathvista_mcq`` | testmini rows with ``question_type`` multi_choice | 1,000 (see docs) |

``python -m vrh_lmms.tasks.common.vqa_paper VAW_ROOT [--rule JSON]`` prints how many VAW questions a rule gives.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vrh_lmms.base.boxes.geometry import xywh_to_xyxy
from vrh_lmms.tasks.common import docs as D
from vrh_lmms.tasks.common.sources import Source, SourceError, resolve, spec_row
from vrh_lmms.tasks.common.vaw_mc import VAWMCRule, build_questions, counts
from vrh_lmms.tasks.common.vqa_data import MC_SUFFIX, load_vqa_docs, vaw_inputs, vaw_types

PAPER_VAW_MC = 6309
SPATIALRGPT_OBJECT_SIZE = ("width_data", "height_data")


# ------------------------------------------------------------------------------------------------ filters
def _metas(docs) -> list[dict[str, Any]]:
    return [json.loads(m) if m else {} for m in docs["vrh_meta"]]


def keep_all(docs) -> list[bool]:
    return [True] * len(docs)


def spatialrgpt_object_size(docs) -> list[bool]:
    """SpatialRGPT-Bench's quantitative object-size questions: ``qa_info.type == "quantitative"`` and
    ``qa_info.category`` in width_data / height_data (SpatialRGPT ``evaluate_spatial_with_gpt4.py`` categories;
    the docs carry them in ``vrh_meta`` as ``qa_type`` / ``category``)."""
    return [m.get("qa_type") == "quantitative" and m.get("category") in SPATIALRGPT_OBJECT_SIZE for m in _metas(docs)]


def mathvista_mcq(docs) -> list[bool]:
    """MathVista's multiple-choice questions: ``question_type == "multi_choice"`` (AI4Math/MathVista card)."""
    return [m.get("question_type") == "multi_choice" for m in _metas(docs)]


@dataclass(frozen=True)
class PaperSubset:
    benchmark: str  # a key of vqa_data.VQA_BENCHMARKS
    split: str
    keep: Callable[[Any], list[bool]]
    paper_size: int


SUBSETS: dict[str, PaperSubset] = {
    "vrh_vqa_paper_spatial457_l1_single": PaperSubset("spatial457_l1_single", "test", keep_all, 670),
    "vrh_vqa_paper_spatialrgpt_object_size": PaperSubset("spatialrgpt", "val", spatialrgpt_object_size, 266),
    "vrh_vqa_paper_cv_bench": PaperSubset("cv_bench", "test", keep_all, 2638),
    "vrh_vqa_paper_mmstar": PaperSubset("mmstar", "val", keep_all, 1500),
    "vrh_vqa_paper_countbenchqa": PaperSubset("countbenchqa", "test", keep_all, 491),
    "vrh_vqa_paper_mathvista_mcq": PaperSubset("mathvista", "testmini", mathvista_mcq, 1000),
}
PAPER_SIZES = {"vrh_vqa_paper_vaw_mc": PAPER_VAW_MC, **{t: s.paper_size for t, s in SUBSETS.items()}}


def select(docs, keep: Sequence[bool], task: str):
    """The kept docs, re-keyed (``vrh_key`` = task + position among the kept docs)."""
    if len(keep) != len(docs):
        raise ValueError(f"{task}: filter returned {len(keep)} flags for {len(docs)} docs")
    rows = [i for i, k in enumerate(keep) if k]
    if not rows:
        raise SourceError(f"{task}: none of the {len(docs)} rows loaded is in the paper's subset (wrong data or "
                          f"split? docs/tasks.md 'vrh_vqa_paper' lists the fields each subset reads)")
    kept = docs.select(rows)
    if "vrh_key" in kept.column_names:
        kept = kept.remove_columns("vrh_key")
    return D.with_keys(kept.flatten_indices(), task)


def subset_loader(task: str, subset: PaperSubset) -> Callable[[Any], Any]:
    def process_docs(dataset):
        docs = load_vqa_docs(subset.benchmark, subset.split, task, dataset)
        return select(docs, subset.keep(docs), task)

    process_docs.__name__ = process_docs.__qualname__ = task
    process_docs.__doc__ = f"Docs of {task}: {subset.benchmark} split {subset.split!r}, the paper's subset."
    return process_docs


# ------------------------------------------------------------------------------------------------ VAW MC
def vaw_mc_rule(spec: dict[str, Any] | None) -> VAWMCRule:
    """The rule: the source spec's ``mc`` (a derived YAML's own choice) wins over ``VRH_VAW_MC`` (JSON)."""
    if spec and spec.get("mc"):
        return VAWMCRule.from_json(spec["mc"])
    return VAWMCRule.from_json(os.environ.get("VRH_VAW_MC"))


def vaw_mc_docs(source: Source, rule: VAWMCRule):
    """Docs of the VAW multiple-choice questions (images: Visual Genome, instance outlined or cropped)."""
    vaw = vaw_inputs(source, rule.split)
    boxed = vaw.mode == "box"
    instances = vaw.instances()
    questions = build_questions(instances, vaw.types, rule)
    if not questions:
        raise SourceError(f"{vaw.origin}: none of the {len(instances)} VAW instances in {vaw.path} qualifies for a "
                          f"multiple-choice question under {json.dumps(rule.as_dict())} (VRH_VAW_MC)")
    records = []
    for q in questions:
        box = xywh_to_xyxy(list(q.box_xywh))
        records.append({
            "image": str(vaw.image(q.image_id)), "vrh_prompt": q.prompt(MC_SUFFIX, boxed),
            "vrh_target": q.answer_letter, "vrh_answer_type": "choice", "vrh_options": list(q.options),
            "vrh_question_type": q.parent,
            "vrh_meta": json.dumps({"letters": "ABCDEFGHIJ"[: len(q.options)],
                                    "draw_boxes": [box] if boxed else [], "crop": None if boxed else box,
                                    "attribute": q.answer, "attribute_type": q.subtype, "parent_type": q.parent,
                                    "instance_id": q.instance_id}),
            "image_id": q.image_id, "question_id": f"{q.instance_id}:mc",
        })
    return D.from_records(records)


def vrh_vqa_paper_vaw_mc(dataset):
    """Docs of vrh_vqa_paper_vaw_mc: VAW (``VRH_VAW_ROOT``) as seeded multiple choice (``vaw_mc``)."""
    spec = spec_row(dataset)
    source = resolve("VAW", spec, Source("raw", {}), "raw", ("raw",))
    return D.with_keys(vaw_mc_docs(source, vaw_mc_rule(spec)), "vrh_vqa_paper_vaw_mc")


globals().update({task: subset_loader(task, subset) for task, subset in SUBSETS.items()})


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m vrh_lmms.tasks.common.vqa_paper",
                                 description="Count the VAW multiple-choice questions a rule gives on a real split "
                                             "(reads the JSON files only).")
    ap.add_argument("root", help="adobe-research/vaw_dataset folder (data/<split>.json and the type files)")
    ap.add_argument("--rule", default=None, help="the rule as JSON (VRH_VAW_MC's format); default: the shipped rule")
    args = ap.parse_args(argv)
    root = Path(args.root).expanduser()
    data = root / "data" if (root / "data").is_dir() else root
    try:
        rule = VAWMCRule.from_json(args.rule)
        path = data / f"{rule.split}.json"
        if not path.is_file():
            raise SourceError(f"{path} is missing (VAW ships data/train_part1.json, val.json, test.json)")
        instances = json.loads(path.read_text())
        questions = build_questions(instances, vaw_types(data, str(root)), rule)
    except ValueError as err:  # VAWMCError, SourceError, bad JSON: one line, no traceback
        raise SystemExit(f"error: {err}") from None
    print(json.dumps({"rule": rule.as_dict(), **counts(questions, len(instances)), "paper": PAPER_VAW_MC}, indent=1))


if __name__ == "__main__":
    main()
