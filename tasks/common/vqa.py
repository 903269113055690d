"""doc_to_visual / doc_to_text / process_results of the vrh VQA tasks (rule-based scoring, no LLM judge)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from PIL import ImageDraw

from vrh_lmms.tasks.common import answers as A
from vrh_lmms.tasks.common.records import VQA_METRICS, vqa_result, with_clusters

OUTLINE = (255, 0, 0)


def _meta(doc: Mapping[str, Any]) -> dict[str, Any]:
    raw = doc.get("vrh_meta")
    return json.loads(raw) if raw else {}


def doc_to_visual(doc: Mapping[str, Any]) -> list:
    """The doc's image, cropped or with its regions outlined (and labelled) when the benchmark asks for it."""
    image = (doc["decoded_image"] if doc.get("decoded_image") is not None else doc["image"]).convert("RGB")
    meta = _meta(doc)
    if meta.get("crop"):
        x1, y1, x2, y2 = meta["crop"]
        return [image.crop((int(x1), int(y1), max(int(x2), int(x1) + 1), max(int(y2), int(y1) + 1)))]
    boxes = meta.get("draw_boxes") or []
    if boxes:
        image = image.copy()
        draw = ImageDraw.Draw(image)
        width = max(2, round(min(image.size) / 150))
        for k, (x1, y1, x2, y2) in enumerate(boxes):
            draw.rectangle([x1, y1, x2, y2], outline=OUTLINE, width=width)
            if meta.get("labels"):
                draw.text((x1 + width + 1, y1 + width + 1), f"Region [{k}]", fill=OUTLINE)
    return [image]


def doc_to_text(doc: Mapping[str, Any], lmms_eval_specific_kwargs: Mapping[str, Any] | None = None) -> str:
    kwargs = lmms_eval_specific_kwargs or {}
    return f"{kwargs.get('pre_prompt', '')}{doc['vrh_prompt']}{kwargs.get('post_prompt', '')}"


# ------------------------------------------------------------------------------------------------ readers
def read_choice(reply: str, doc: Mapping[str, Any], meta: dict) -> tuple[str | None, bool]:
    letters = meta.get("letters") or "ABCD"
    pred = A.extract_choice(reply, list(letters), doc.get("vrh_options") or ())
    return pred, pred == str(doc["vrh_target"]).strip().upper()


def read_yes_no(reply: str, doc: Mapping[str, Any], meta: dict) -> tuple[str | None, bool]:
    pred = A.extract_yes_no(reply)
    return pred, pred is not None and pred == A.yes_no_of(doc["vrh_target"])


def read_number(reply: str, doc: Mapping[str, Any], meta: dict) -> tuple[str | None, bool]:
    value = A.extract_number(reply)
    if value is None:
        return None, False
    return f"{value:g}", math.isclose(value, float(doc["vrh_target"]), abs_tol=1e-6)


def read_short(reply: str, doc: Mapping[str, Any], meta: dict) -> tuple[str | None, bool]:
    """Spatial457-style short answers: yes/no (True/False), integers, or a word."""
    target = str(doc["vrh_target"]).strip()
    if A.yes_no_of(target) is not None and not target.isdigit():
        return read_yes_no(reply, doc, meta)
    if re.fullmatch(r"[-+]?\d+(\.\d+)?", target):
        return read_number(reply, doc, meta)
    text = A.normalize_text(A.answer_text(reply))
    if not text:
        return None, False
    goal = A.normalize_text(target)
    hit = text == goal or (len(text.split()) <= 4 and re.search(rf"(?<!\w){re.escape(goal)}(?!\w)", text) is not None)
    return text, hit


def read_mathvista(reply: str, doc: Mapping[str, Any], meta: dict) -> tuple[str | None, bool]:
    """Offline MathVista extraction: choices by letter or text, numbers by regex rounded to the precision."""
    target = str(doc["vrh_target"]).strip()
    choices = list(doc.get("vrh_options") or [])
    if meta.get("question_type") == "multi_choice" and choices:
        letter = A.extract_choice(reply, list(meta.get("letters") or "ABCD"[: len(choices)]), choices)
        if letter is None:
            return None, False
        pred = choices["ABCDEFGHIJ".index(letter)]
        return pred, pred.strip() == target
    kind = meta.get("answer_type")
    if kind == "list":
        values = A.extract_list(reply)
        if values is None:
            return None, False
        goal = A.extract_list(target)
        return str(values), goal is not None and len(goal) == len(values) and all(
            math.isclose(a, b, abs_tol=1e-6) for a, b in zip(values, goal))
    value = A.extract_number(reply, prefer="last" if len(A.answer_text(reply)) > 40 else "first")
    if value is None:
        return None, False
    if kind == "integer":
        pred = str(int(value))
        return pred, pred == target or _num_equal(value, target, 0)
    precision = meta.get("precision")
    pred = str(A.round_to(value, precision))
    return pred, _num_equal(A.round_to(value, precision), target, precision)


def _num_equal(value: float, target: str, precision) -> bool:
    try:
        return math.isclose(A.round_to(value, precision), A.round_to(float(target), precision), abs_tol=1e-9)
    except ValueError:
        return False


# SpatialRGPT: qualitative answers by yes/no or the region named first; quantitative by number and unit (+-25%).
_QUANTITY = re.compile(r"([-+]?\d+(?:\.\d+)?)\s*(millimet(?:er|re)s?|centimet(?:er|re)s?|kilomet(?:er|re)s?|"
                       r"met(?:er|re)s?|inch(?:es)?|feet|foot|yards?|mm|cm|km|ft|yd|in|m)\b", re.IGNORECASE)
_REGION = re.compile(r"region\s*\[?\s*(\d+)\s*\]?", re.IGNORECASE)
_CLOCK = re.compile(r"(\d{1,2})\s*o'?\s*clock", re.IGNORECASE)


def _unit_factor(unit: str) -> float:
    u = unit.lower()
    for prefixes, factor in ((("mm", "millimet"), 0.001), (("cm", "centimet"), 0.01), (("km", "kilomet"), 1000.0),
                             (("inch",), 0.0254), (("ft", "feet", "foot"), 0.3048), (("yd", "yard"), 0.9144),
                             (("met",), 1.0)):
        if any(u.startswith(p) for p in prefixes):
            return factor
    return {"m": 1.0, "in": 0.0254}[u]


def meters(text: str) -> float | None:
    """The first length in the text, converted to meters (mm, cm, m, km, inches, feet, yards)."""
    m = _QUANTITY.search(text or "")
    return None if not m else float(m.group(1)) * _unit_factor(m.group(2))


def read_spatialrgpt(reply: str, doc: Mapping[str, Any], meta: dict) -> tuple[str | None, bool]:
    target = str(doc["vrh_target"])
    text = A.answer_text(reply)
    if meta.get("category") == "direction":
        got, goal = _CLOCK.search(text), _CLOCK.search(target)
        if not got:
            return None, False
        diff = abs(int(got.group(1)) % 12 - int(goal.group(1)) % 12) if goal else 99
        return f"{got.group(1)} o'clock", goal is not None and min(diff, 12 - diff) <= 1
    if meta.get("qa_type") == "quantitative":
        got, goal = meters(text), meters(target)
        if got is None:
            return None, False
        return f"{got:.3g} m", goal is not None and 0.75 * goal <= got <= 1.25 * goal
    goal_yn = A.extract_yes_no(target)
    if goal_yn is not None:
        return read_yes_no(reply, {"vrh_target": goal_yn}, meta)
    got, goal = _REGION.search(text), _REGION.search(target)
    if not got:
        return None, False
    return f"Region [{got.group(1)}]", goal is not None and got.group(1) == goal.group(1)


# Benchmark fields copied from vrh_meta into the record, for breakdowns and official metrics (vrh_lmms.report.
# official_metrics): VAW's attribute and its types, SpatialRGPT's qa_type, CV-Bench's image source.
RECORD_FIELDS = ("attribute", "polarity", "attribute_type", "parent_type", "head_tail", "instance_id", "qa_type",
                 "source")

READERS = {"choice": read_choice, "yes_no": read_yes_no, "number": read_number, "short": read_short,
           "mathvista": read_mathvista, "spatialrgpt": read_spatialrgpt}


def process_results(doc: Mapping[str, Any], results: list[str]) -> dict[str, Any]:
    """acc / parse_failure (each with its image, for lmms-eval's clustered SE) plus the VQA vrh_record."""
    reply = results[0] if results else ""
    meta = _meta(doc)
    reader = READERS[doc["vrh_answer_type"]]
    pred, correct = reader(reply, doc, meta)
    extra = {k: meta[k] for k in RECORD_FIELDS if k in meta}
    result = vqa_result(image_id=doc["image_id"], pred=pred, target=doc["vrh_target"], correct=correct, raw=reply,
                        question_type=doc.get("vrh_question_type", ""), question_id=doc.get("question_id"), **extra)
    return with_clusters(result, VQA_METRICS, "acc")  # lmms-eval's clustered SE over images (cluster_key)
