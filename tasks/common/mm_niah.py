"""MM-NIAH retrieval subsets (`vrh_mmniah_retrieval_text`, `vrh_mmniah_retrieval_image`) from a local snapshot.

Source: huggingface.co/datasets/OpenGVLab/MM-NIAH, schema as published in github.com/OpenGVLab/MM-NIAH README
("Data Format"), read the way its own code reads it (utils/tools.py `get_input`, eval_internvl.py, shells/data/
mm_niah.json). Snapshot layout (`VRH_MMNIAH_DIR`, the download root): `mm_niah_<split>/annotations/<task>.jsonl`
and `mm_niah_<split>/images/` (the extracted `images.tar.gz`), split `val` or `test` (`VRH_MMNIAH_SPLIT`, default
val); `VRH_MMNIAH_DIR` may also be one split's folder (holding `annotations/`), and `VRH_MMNIAH_IMAGES` another
image folder. One JSON object a line: `id` (int), `images_list` (image paths relative to the image folder, one per
`<image>` of context then question), `context` (str, `<image>` placeholders), `question` (str), `answer` (str for
retrieval-text; int, the 0-based option, for retrieval-image), `meta`: `placed_depth`, `context_length`,
`context_length_text`, `context_length_image`, `num_images`, `needles` (text needles: the sentence; image needles:
the image's relative path), `choices` (text options or null), `choices_image_path` (image options or null).

Prompt as the benchmark builds it: `{context}\\n{question}`, options appended as `\\nA. <option>` (image options
add their images after the context's) and the benchmark's instruction line. Each `<image>` becomes `<image k>`
(1-based, lmms-eval's interleave marker; a backend that does not interleave shows the images first, in order).

Evidence: retrieval-text -> `{"kind": "text", "text": <needle>}` when the needle sentence is spelled exactly once in
the rendered prompt; retrieval-image -> `{"kind": "image", "index": i}` when `meta.needles` names an image that is
the i-th of `images_list` (the haystack image carrying the needle). The record gives no pasted location, so there
is no `image_box` form; a record whose needle image is not one of the context's images (a needle named only by the
pasted picture's own path) does not tell which image holds it. Such records are left out by default (discovery
needs the evidence; `VRH_MMNIAH_DOCS=evidence`); `VRH_MMNIAH_DOCS=all` keeps every record, as the benchmark's own
accuracy counts them, with `vrh_evidence` None and `vrh_evidence_note` saying why. `VRH_MMNIAH_MAX_CONTEXT`: only
records whose `meta.context_length` (the benchmark's own token count, text + image) is at most N; `VRH_MMNIAH_LIMIT`:
the first N records read. Contexts keep what the records hold (the `</s>` between concatenated OBELICS documents
included), as the benchmark's eval scripts feed them. Scoring as the benchmark's calculate_scores.py `is_correct`.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vrh_lmms.base.errors import VRHError
from vrh_lmms.tasks.common import haystack_media as H
from vrh_lmms.tasks.common.records import vqa_result

DIR_ENV, SPLIT_ENV, IMAGES_ENV, LIMIT_ENV, DOCS_ENV, MAX_CONTEXT_ENV = (
    "VRH_MMNIAH_DIR", "VRH_MMNIAH_SPLIT", "VRH_MMNIAH_IMAGES", "VRH_MMNIAH_LIMIT", "VRH_MMNIAH_DOCS",
    "VRH_MMNIAH_MAX_CONTEXT")
DOCS = ("evidence", "all")
SPLITS = ("val", "test")
logger = logging.getLogger(__name__)
PLACEHOLDER = "<image>"
MC_INSTRUCTION = "Answer with the option's letter from the given choices directly."
OPEN_INSTRUCTION = "Answer the question using a single word or phrase."
SNAPSHOT = "the MM-NIAH snapshot (huggingface.co/datasets/OpenGVLab/MM-NIAH: mm_niah_<split>/annotations, images)"


def split_folder() -> tuple[Path, str]:
    root = H.env_folder(DIR_ENV, SNAPSHOT)
    split = os.environ.get(SPLIT_ENV, "").strip() or "val"
    if split not in SPLITS:
        raise VRHError(f"{SPLIT_ENV}={split!r}: MM-NIAH's splits are {', '.join(SPLITS)}")
    if (root / "annotations").is_dir():
        return root, split
    return root / f"mm_niah_{split}", split


def read_records(subset: str) -> tuple[list[dict[str, Any]], Path, str]:
    """The records of `subset` (retrieval-text / retrieval-image), the image folder, and the split."""
    folder, split = split_folder()
    ann = folder / "annotations" / f"{subset}.jsonl"
    if not ann.is_file():
        raise VRHError(f"missing annotations file {ann} (MM-NIAH {subset}, split {split}; {DIR_ENV}, {SPLIT_ENV})")
    images_var = IMAGES_ENV if os.environ.get(IMAGES_ENV, "").strip() else DIR_ENV
    images = Path(os.environ[IMAGES_ENV].strip()).expanduser() if images_var == IMAGES_ENV else folder / "images"
    H.media_folder(images, images_var, f"MM-NIAH {split} images, the extracted images.tar.gz")
    records = []
    limit, max_context = H.read_limit(LIMIT_ENV), H.read_limit(MAX_CONTEXT_ENV)
    with ann.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            if limit is not None and len(records) >= limit:
                break
            try:
                rec = json.loads(line)
                for key in ("id", "images_list", "context", "question", "answer", "meta"):
                    rec[key]  # noqa: B018  (presence check)
            except (ValueError, KeyError) as exc:
                raise VRHError(f"{ann}:{line_no}: not an MM-NIAH record ({type(exc).__name__}: {exc})") from None
            if max_context is not None and int(rec["meta"].get("context_length") or 0) > max_context:
                continue
            rec["_where"] = f"{ann.name}:{line_no}"
            records.append(rec)
    return records, images, split


def number_images(text: str, start: int) -> tuple[str, int]:
    """`<image>` -> `<image k>` from k = start + 1 on; returns the text and the next start."""
    parts = text.split(PLACEHOLDER)
    out = parts[0]
    for j, part in enumerate(parts[1:]):
        out += f"<image {start + j + 1}>{part}"
    return out, start + len(parts) - 1


def build_prompt(rec: Mapping[str, Any]) -> tuple[str, list[str], str]:
    """(prompt, image names in prompt order, question) as utils/tools.py get_input + `{context}\\n{question}`."""
    meta = rec["meta"]
    names = list(rec["images_list"])
    n_placeholders = rec["context"].count(PLACEHOLDER) + rec["question"].count(PLACEHOLDER)
    if n_placeholders != len(names):
        raise VRHError(f"{rec['_where']}: {n_placeholders} <image> placeholders but {len(names)} images_list entries")
    choices, choice_images = meta.get("choices"), meta.get("choices_image_path")
    if choices and choice_images:
        raise VRHError(f"{rec['_where']}: both meta.choices and meta.choices_image_path are set")
    question = rec["question"]
    if choices:
        question += "".join(f"\n{chr(ord('A') + k)}. {c}" for k, c in enumerate(choices)) + f"\n{MC_INSTRUCTION}"
    elif choice_images:
        question += "".join(f"\n{chr(ord('A') + k)}. {PLACEHOLDER}" for k in range(len(choice_images)))
        question += f"\n{MC_INSTRUCTION}"
        names += list(choice_images)
    else:
        question += f"\n{OPEN_INSTRUCTION}"
    context, k = number_images(rec["context"], 0)
    question_text, _ = number_images(question, k)
    return f"{context}\n{question_text}", names, rec["question"]


def text_evidence(rec: Mapping[str, Any], prompt: str) -> tuple[dict[str, Any] | None, str]:
    needles = [n for n in rec["meta"].get("needles") or [] if isinstance(n, str) and n]
    if len(needles) != 1:
        return None, f"meta.needles holds {len(needles)} text needles, not one"
    hits = prompt.count(needles[0])
    if hits != 1:
        return None, f"the needle sentence occurs {hits} times in the prompt, not once"
    return {"kind": "text", "text": needles[0], "query": rec["question"]}, ""


def image_evidence(rec: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str]:
    needles = [str(n) for n in rec["meta"].get("needles") or []]
    context_images = [str(p) for p in rec["images_list"]]
    hits = [i for i, p in enumerate(context_images) if p in needles]
    if len(needles) == 1 and len(hits) == 1:
        return {"kind": "image", "index": hits[0]}, ""
    return None, (f"meta.needles {needles} names {len(hits)} of the context's images_list, not one: the record does "
                  f"not tell which image holds the needle")


def make_docs(subset: str, task: str):
    keep = os.environ.get(DOCS_ENV, "").strip() or "evidence"
    if keep not in DOCS:
        raise VRHError(f"{DOCS_ENV}={keep!r}: use evidence (records that tell where the needle is) or all")
    records, images, split = read_records(subset)
    folder = H.ImageFolder(images, IMAGES_ENV if os.environ.get(IMAGES_ENV, "").strip() else DIR_ENV)
    rows = []
    for rec in records:
        prompt, names, question = build_prompt(rec)
        paths = folder.paths(names, rec["_where"])
        answer = rec["answer"]
        if subset == "retrieval-text":
            evidence, note = text_evidence(rec, prompt)
            target = str(answer)
        else:
            if not isinstance(answer, int) or isinstance(answer, bool):
                raise VRHError(f"{rec['_where']}: retrieval-image answer {answer!r} is not an option index")
            evidence, note = image_evidence(rec)
            target = chr(ord("A") + answer)
        rows.append({"vrh_prompt": prompt, "vrh_images": paths, "vrh_image_sizes": folder.sizes(paths),
                     "vrh_target": target, "vrh_answer": json.dumps(answer), "vrh_evidence": evidence,
                     "vrh_evidence_note": note, "vrh_question": question, "vrh_split": split,
                     "placed_depth": json.dumps(rec["meta"].get("placed_depth")),
                     "context_length": int(rec["meta"].get("context_length") or 0),
                     "image_id": f"mmniah_{split}_{subset}_{rec['id']}", "question_id": str(rec["id"])})
    placed = [r for r in rows if r["vrh_evidence"] is not None]
    if keep == "evidence":
        if not placed:
            why = sorted({r["vrh_evidence_note"] for r in rows})[0]
            raise VRHError(f"{task}: none of the {len(rows)} records tells where the needle is ({why}); "
                           f"{DOCS_ENV}=all evaluates them without evidence")
        if len(placed) < len(rows):
            logger.info("%s: %d of %d records tell where the needle is; the others are left out (%s=all keeps "
                        "them)", task, len(placed), len(rows), DOCS_ENV)
        rows = placed
    return H.to_dataset(rows, task)


def vrh_mmniah_retrieval_text(dataset):
    """Docs of MM-NIAH retrieval-text (lmms-eval passes only the placeholder dataset)."""
    return make_docs("retrieval-text", "vrh_mmniah_retrieval_text")


def vrh_mmniah_retrieval_image(dataset):
    """Docs of MM-NIAH retrieval-image."""
    return make_docs("retrieval-image", "vrh_mmniah_retrieval_image")


# ------------------------------------------------------------------------------------------------ scoring
_PUNCT = ";/[]\"{}()=+\\_-><@`,?!"
_COMMA_DIGITS = re.compile(r"(\d)(,)(\d)")
_PERIOD = re.compile(r"(?!<=\d)(\.)(?!\d)")
_NUMBERS = {w: str(i) for i, w in enumerate(("zero one two three four five six seven eight nine ten eleven twelve "
                                             "thirteen fourteen fifteen sixteen seventeen eighteen nineteen "
                                             "twenty").split())}
_NUMBERS.update({w: str(10 * i) for i, w in enumerate("thirty forty fifty sixty seventy eighty ninety".split(), 3)})


def vqa_normalize(text: str) -> str:
    """The VQA normalisation the benchmark applies before matching (punctuation, number words, articles)."""
    text = text.replace("\n", " ").replace("\t", " ").strip()
    out = text
    for p in _PUNCT:
        if (p + " " in text or " " + p in text) or _COMMA_DIGITS.search(text) is not None:
            out = out.replace(p, "")
        else:
            out = out.replace(p, " ")
    out = _PERIOD.sub("", out)
    words = [_NUMBERS.get(w, w) for w in out.lower().split()]
    return " ".join(w for w in words if w not in ("a", "an", "the"))


def text_correct(reply: str, answer: str) -> bool:
    """MM-NIAH's open answers: the normalised answer occurs in the normalised reply as whole words."""
    gold = vqa_normalize(str(answer))
    return bool(gold) and re.search(r"\b" + re.escape(gold) + r"\b", vqa_normalize(reply)) is not None


def read_option(reply: str) -> int | None:
    """The chosen option index as is_correct reads it: a bare number is the index itself, else one letter."""
    text = reply.strip(".")
    if text.isdigit():
        return int(text)
    text = text.lower().replace("the answer is", "").replace("*", "")
    if "." in text:
        text = text.split(".")[0].replace(",", "").strip()
    text = text.strip()
    if len(text) != 1 or not text.isalpha():
        return None
    return ord(text) - ord("a")


def process_results(doc: Mapping[str, Any], results: list[str]) -> dict[str, Any]:
    reply = results[0] if results else ""
    answer = json.loads(doc["vrh_answer"])
    if isinstance(answer, int):
        index = read_option(reply)
        pred = None if index is None else (chr(ord("A") + index) if 0 <= index < 26 else str(index))
        correct, qtype = index == answer, "mmniah_retrieval_image"
    else:
        pred = vqa_normalize(reply) or None
        correct, qtype = text_correct(reply, answer), "mmniah_retrieval_text"
    return vqa_result(image_id=doc["image_id"], pred=pred, target=doc["vrh_target"], correct=correct, raw=reply,
                      question_type=qtype, question_id=doc.get("question_id"))
