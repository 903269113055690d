"""Visual Haystacks single-needle QA (`vrh_visual_haystacks_single`) from a local snapshot and COCO images.

Source: huggingface.co/datasets/tsunghanwu/visual_haystacks (downloaded as the benchmark's README says,
`huggingface-cli download --repo-type dataset tsunghanwu/visual_haystacks --local-dir dataset/VHs_qa`), read as its
toolkit github.com/visual-haystacks/vhs_benchmark reads it (main.py, solvers/base_solver.py, utils.py run_eval).
Snapshot layout (`VRH_VHS_DIR`, the download root): `single_needle/<subset>/visual_haystack_<size>.json`, subset
`VHs_large` (default) or `VHs_small` (`VRH_VHS_SUBSET`), size `oracle`, 2, 3, 5, 10 (default), 20, 50, 100, 500,
1000, 10000 (`VRH_VHS_SIZE`). Each file is one JSON list; an entry has `conversations` (LLaVA style: the human turn's
`value` is the question "For the image with <anchor>, is there <target>?", the gpt turn's `value` is "yes"/"no"),
`pos_image` (one path: the needle image) and `neg_image` (the distractors), paths relative to the COCO root
(`VRH_VHS_IMAGES`, the toolkit's `image_root`, e.g. holding `val2017/`).

Images in the prompt: the distractors with the needle inserted at a seeded position (as the toolkit's
`construct_image_paths` inserts it, `randint(0, n_neg)`, seeded per entry by `VRH_VHS_SEED`, default 0, so a doc's
order is the same every run); evidence `{"kind": "image", "index": <that position>}`. Prompt as the toolkit's:
"You are given a set of images. Please answer the following question in Yes or No: <question>". Scored as its
run_eval: correct when the gold word is one of the reply's lower-cased word tokens; a reply with neither yes nor
no is a parse failure (the toolkit's "compliance").
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from vrh_lmms.base.errors import VRHError
from vrh_lmms.tasks.common import haystack_media as H
from vrh_lmms.tasks.common.records import vqa_result

DIR_ENV, IMAGES_ENV, SUBSET_ENV, SIZE_ENV, SEED_ENV, LIMIT_ENV = (
    "VRH_VHS_DIR", "VRH_VHS_IMAGES", "VRH_VHS_SUBSET", "VRH_VHS_SIZE", "VRH_VHS_SEED", "VRH_VHS_LIMIT")
TASK = "vrh_visual_haystacks_single"
SUBSETS = ("VHs_large", "VHs_small")
SIZES = ("oracle", "2", "3", "5", "10", "20", "50", "100", "500", "1000", "10000")
PREFIX = "You are given a set of images. Please answer the following question in Yes or No: "
SNAPSHOT = "the Visual Haystacks snapshot (huggingface.co/datasets/tsunghanwu/visual_haystacks: single_needle/...)"


def _choice(var: str, default: str, allowed: tuple[str, ...]) -> str:
    value = os.environ.get(var, "").strip() or default
    if value not in allowed:
        raise VRHError(f"{var}={value!r}: use one of {', '.join(allowed)}")
    return value


def qa_file():
    root = H.env_folder(DIR_ENV, SNAPSHOT)
    subset, size = _choice(SUBSET_ENV, "VHs_large", SUBSETS), _choice(SIZE_ENV, "10", SIZES)
    path = root / "single_needle" / subset / f"visual_haystack_{size}.json"
    if not path.is_file():
        raise VRHError(f"missing annotations file {path} (Visual Haystacks {subset}, haystack {size}; {DIR_ENV}, "
                       f"{SUBSET_ENV}, {SIZE_ENV})")
    return path


def _entry_fields(entry: Any, where: str) -> tuple[str, str, str, list[str]]:
    try:
        turns = entry["conversations"]
        question = str(turns[0]["value"])
        answer = str(turns[1]["value"]).strip().lower()
        pos, neg = [str(p) for p in entry["pos_image"]], [str(p) for p in entry["neg_image"]]
    except (KeyError, IndexError, TypeError) as exc:
        raise VRHError(f"{where}: not a Visual Haystacks entry ({type(exc).__name__}: {exc})") from None
    if len(pos) != 1:
        raise VRHError(f"{where}: pos_image holds {len(pos)} images; the single-needle set has one")
    if answer not in ("yes", "no"):
        raise VRHError(f"{where}: the answer {answer!r} is not yes/no")
    return question, answer, pos[0], neg


def vrh_visual_haystacks_single(dataset):
    """Docs of the single-needle challenge (lmms-eval passes only the placeholder dataset)."""
    path = qa_file()
    folder = H.ImageFolder(H.media_folder(H.env_folder(IMAGES_ENV, "the COCO root the entries' image paths are "
                                                       "relative to"), IMAGES_ENV, "COCO images"), IMAGES_ENV)
    seed_text = os.environ.get(SEED_ENV, "").strip() or "0"
    if not seed_text.isdigit():
        raise VRHError(f"{SEED_ENV}={seed_text!r}: give a whole number")
    seed = int(seed_text)
    limit = H.read_limit(LIMIT_ENV)
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise VRHError(f"{path}: not JSON ({exc})") from None
    if not isinstance(entries, list):
        raise VRHError(f"{path}: expected a JSON list of entries")
    rows = []
    for i, entry in enumerate(entries[:limit]):
        where = f"{path.name}[{i}]"
        question, answer, pos, neg = _entry_fields(entry, where)
        at = int(np.random.default_rng([seed, i]).integers(0, len(neg) + 1))
        paths = folder.paths(neg[:at] + [pos] + neg[at:], where)
        qid = str(entry.get("id", entry.get("question_id", i))) if isinstance(entry, dict) else str(i)
        rows.append({"vrh_prompt": PREFIX + question, "vrh_images": paths, "vrh_image_sizes": folder.sizes(paths),
                     "vrh_target": answer, "vrh_evidence": {"kind": "image", "index": at}, "vrh_question": question,
                     "image_id": f"vhs_{path.stem}_{i}", "question_id": qid})
    return H.to_dataset(rows, TASK)


def process_results(doc: Mapping[str, Any], results: list[str]) -> dict[str, Any]:
    reply = results[0] if results else ""
    words = re.findall(r"\w+", reply.lower())
    said = [w for w in ("yes", "no") if w in words]
    pred = said[0] if len(said) == 1 else (None if not said else "yes/no")
    return vqa_result(image_id=doc["image_id"], pred=pred, target=doc["vrh_target"],
                      correct=doc["vrh_target"] in words, raw=reply, question_type="visual_haystacks_single",
                      question_id=doc.get("question_id"), needle_index=int(doc["vrh_evidence"]["index"]),
                      n_images=len(doc["vrh_images"]))
