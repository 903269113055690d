"""Sweep folders in the documented format (docs/sweeps.md, docs/contracts.md), for report tests.

Sample lines copy what `vrh-lmms sweep` writes (vrh_lmms/harness/lmms.py `write_run`: lmms-eval's own logged sample from
lmms_eval/evaluator.py, image columns dropped from `doc`), field for field as in a real line of
`configs/baseline/samples_vrh_synth_grounding.jsonl` of `vrh-lmms demo`: `doc` (non-image fields), `target` (the
gt box list), `arguments` (prompt, generation kwargs, doc_id, task, split), `resps`, `filtered_resps`,
`token_counts`, `doc_hash` (lmms-eval 0.7.3 hashes `Instance.doc`, which is None: sha256 of "null" on every line),
the task's scalar metrics and `vrh_record`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MODEL = "org/Tiny-VLM-2B"
TASK = "vrh_refcoco_testA"
DOC_HASH = hashlib.sha256(b"null").hexdigest()
SHAPES = ("dog", "cat", "car", "bike", "cup", "man", "woman", "tree")
SIDES = ("left", "right", "middle", "front", "back", "big", "small")


@dataclass(frozen=True)
class Doc:
    doc_id: int
    image_id: str
    expression: str
    question_id: str
    gt_box: tuple[float, float, float, float]


def make_docs(rng: np.random.Generator, n_images: int = 300, sizes: tuple[int, int] = (1, 7)) -> list[Doc]:
    """RefCOCO-like docs: each image holds 1-7 referring expressions, each with its own question id and box."""
    docs, doc_id = [], 0
    for image in range(n_images):
        for j in range(int(rng.integers(sizes[0], sizes[1] + 1))):
            x, y = float(rng.integers(0, 200)), float(rng.integers(0, 200))
            expr = f"the {SIDES[j % len(SIDES)]} {SHAPES[int(rng.integers(len(SHAPES)))]}"
            docs.append(Doc(doc_id, str(400000 + image), expr, str(700000 + doc_id), (x, y, x + 40.0, y + 60.0)))
            doc_id += 1
    return docs


def sample_line(doc: Doc, status: str, task: str = TASK) -> dict:
    gt = list(doc.gt_box)
    pred = {"correct": [gt[0] + 1, gt[1], gt[2] + 1, gt[3]], "mislocated": [gt[0] + 100, gt[1], gt[2] + 100, gt[3]],
            "parse_failure": None}[status]
    iou = {"correct": 0.95, "mislocated": 0.0, "parse_failure": 0.0}[status]
    raw = "I cannot tell." if pred is None else json.dumps([{"bbox_2d": [int(v) for v in pred], "label": "x"}])
    record = {"kind": "grounding", "image_id": doc.image_id, "pred_box": pred, "gt_box": gt, "iou": iou,
              "correct": status == "correct", "status": status, "n_boxes": 0 if pred is None else 1,
              "convention": "qwen2_5_vl", "convention_source": "active", "image_size": [640, 427], "raw": raw,
              "expression": doc.expression, "question_id": doc.question_id}
    prompt = f"Locate {doc.expression} in the image and output its bbox coordinates in JSON format."
    return {
        "doc_id": doc.doc_id,
        "doc": {"expression": doc.expression, "gt_box": gt, "image_id": doc.image_id, "question_id": doc.question_id,
                "image_width": 640, "image_height": 427, "vrh_key": f"{task}#{doc.doc_id}"},
        "target": gt,
        "arguments": [prompt, {"max_new_tokens": 128, "temperature": 0.0, "do_sample": False, "num_beams": 1,
                               "until": ["\n\n"]}, doc.doc_id, task, "testA"],
        "resps": [[raw]], "filtered_resps": [raw], "token_counts": [{"output_tokens": 12}], "doc_hash": DOC_HASH,
        "acc50": float(status == "correct"), "iou": iou, "parse_failure": float(status == "parse_failure"),
        "mislocated": float(status == "mislocated"), "vrh_record": record,
    }


def vrh_block(config_id: str, kind: str, k: int | None, seed: int | None, model: str = MODEL,
              heads_model: str | None = MODEL, heads_path: str = "heads/tiny.json", sha256: str = "0" * 64,
              heads: list[str] | None = None) -> dict:
    heads_file = None if kind == "baseline" or heads_model is None else {
        "path": heads_path, "sha256": sha256, "model": heads_model}
    return {"schema": 1, "family": "qwen2_5_vl", "pretrained": model,
            "geometry": {"layers": 4, "heads": 8, "kv_heads": 2, "head_dim": 16},
            "ablation": {"spec": "none" if kind == "baseline" else config_id, "heads": heads or [],
                         "mode": "none" if kind == "baseline" else "zero", "seed": seed or 0,
                         "method": None if kind == "baseline" else "fold", "heads_file": heads_file},
            "config": {"id": config_id, "kind": kind, "k": k, "seed": seed}}


def write_config(root: Path, config_id: str, vrh: dict, lines: list[dict], task: str = TASK) -> Path:
    folder = root / "configs" / config_id
    folder.mkdir(parents=True)
    with open(folder / f"samples_{task}.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(line) + "\n" for line in lines)
    results = {"results": {task: {"alias": task, "acc50,none": float(np.mean([x["acc50"] for x in lines]))}},
               "model_name": vrh["pretrained"], "vrh": vrh}
    (folder / "results.json").write_text(json.dumps(results))
    return folder


def write_manifest(root: Path, task: str = TASK) -> None:
    (root / "sweep.json").write_text(json.dumps({"model": "vrh_qwen25", "tasks": [task]}))


def statuses_from(correct: np.ndarray, rng: np.random.Generator, p_parse: float = 0.1) -> list[str]:
    """0/1 outcomes -> statuses; wrong answers are parse failures with probability p_parse."""
    wrong = np.where(rng.random(correct.size) < p_parse, "parse_failure", "mislocated")
    return [("correct" if c else str(w)) for c, w in zip(correct, wrong, strict=True)]


class LineWriter:
    """Writes many configurations of the same docs fast: each doc's line is serialised once per status."""

    STATUSES = ("correct", "mislocated", "parse_failure")

    def __init__(self, docs: list[Doc], task: str = TASK):
        self.docs, self.task = docs, task
        self._text = {s: [json.dumps(sample_line(d, s, task)) for d in docs] for s in self.STATUSES}

    def write(self, root: Path, config_id: str, vrh: dict, statuses: list[str], order: list[int] | None = None) -> Path:
        """One configuration; `order` lists doc positions in file order (default: docs order)."""
        folder = root / "configs" / config_id
        folder.mkdir(parents=True)
        rows = range(len(self.docs)) if order is None else order
        text = "".join(self._text[statuses[i]][i] + "\n" for i in rows)
        (folder / f"samples_{self.task}.jsonl").write_text(text, encoding="utf-8")
        acc = float(np.mean([s == "correct" for s in statuses]))
        (folder / "results.json").write_text(json.dumps({"results": {self.task: {"acc50,none": acc}},
                                                         "model_name": vrh["pretrained"], "vrh": vrh}))
        return folder
