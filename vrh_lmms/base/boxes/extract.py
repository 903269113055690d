"""Pull coordinate groups out of free-form model output, tolerating what real (and tiny) models write.

Handled: JSON with ``bbox_2d``/``bbox``/``box``/... keys or bare lists, lists of dicts, code fences, Python-style
quotes, trailing commas, tokens separated by spaces (word-level tokenizers decode ``[12, 40, 60, 88]`` as
``[ 12 , 40 , 60 , 88 ]``), ``(x1,y1),(x2,y2)`` pairs, family tags (``<box>``, ``<|det|>``,
``<|begin_of_box|>``), PaliGemma ``<locNNNN>`` tokens and reasoning blocks (``<think>...</think>``), whose boxes
are drafts rather than answers. Nothing here raises on bad text: no match is an empty list.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)"
_SEP = r"[\s,;()\[\]]+"
# Four numbers opened by a bracket or parenthesis, separated by commas/spaces/brackets:
# [a, b, c, d]  [ a , b , c , d ]  [[a,b,c,d]]  (a,b),(c,d)  [(a, b), (c, d)]
_BRACKET_BOX = re.compile(rf"[\[(]\s*({NUM}){_SEP}({NUM}){_SEP}({NUM}){_SEP}({NUM})")
# Last resort: four comma-separated numbers anywhere ("12, 40, 60, 88").
_BARE_BOX = re.compile(rf"(?<![\w.])({NUM})\s*,\s*({NUM})\s*,\s*({NUM})\s*,\s*({NUM})(?![\w.])")
_BRACKET_POINT = re.compile(rf"[\[(]\s*({NUM})\s*,?\s*({NUM})\s*[\])]")
_LOC4 = re.compile(r"<loc(\d{4})>\s*<loc(\d{4})>\s*<loc(\d{4})>\s*<loc(\d{4})>")
_FENCE = re.compile(r"```(?:json|python|JSON)?\s*(.*?)```", re.DOTALL)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)

BOX_KEYS = ("bbox_2d", "bbox", "box", "bounding_box", "box_2d", "bndbox", "coordinates", "coords", "position")
POINT_KEYS = ("point_2d", "point", "points", "coordinates", "coords", "position", "xy")
CORNER_KEYS = (("x1", "y1", "x2", "y2"), ("xmin", "ymin", "xmax", "ymax"), ("left", "top", "right", "bottom"))

Extractor = Callable[[str], list[list[float]]]


def strip_reasoning(text: str) -> str:
    """Drop ``<think>`` blocks (and a reasoning prefix whose ``<think>`` was in the prompt); keep the answer.

    A ``<think>`` the reply never closes (generation cut inside the reasoning, e.g. GLM-4.1V thinking under a
    128-token cap) holds drafts only: everything from it on is dropped, so such a reply reads as no answer.
    """
    text = _THINK.sub(" ", text or "")
    close = text.lower().rfind("</think>")
    if close >= 0:
        text = text[close + len("</think>"):]
    opened = text.lower().find("<think>")
    if opened >= 0:
        text = text[:opened]
    return text


def tagged(text: str, open_tag: str, close_tag: str) -> list[str]:
    """Contents of every ``open_tag ... close_tag`` span (an unclosed last tag runs to the end)."""
    out, pos = [], 0
    while True:
        start = text.find(open_tag, pos)
        if start < 0:
            return out
        start += len(open_tag)
        end = text.find(close_tag, start)
        out.append(text[start:] if end < 0 else text[start:end])
        if end < 0:
            return out
        pos = end + len(close_tag)


def focus(text: str) -> str:
    """The part of a reply that holds the answer: reasoning removed, GLM's box / <answer> wrappers preferred."""
    text = strip_reasoning(text)
    for open_tag, close_tag in (("<|begin_of_box|>", "<|end_of_box|>"), ("<answer>", "</answer>")):
        spans = tagged(text, open_tag, close_tag)
        if spans:
            return " ; ".join(spans)
    return text


def _numbers(values: Iterable[Any]) -> list[float] | None:
    out = []
    for v in values:
        if isinstance(v, bool):
            return None
        if isinstance(v, (int, float)) or isinstance(v, str) and re.fullmatch(rf"\s*{NUM}\s*", v):
            out.append(float(v))
        else:
            return None
    return out


def _as_box(value: Any) -> list[float] | None:
    """A box from [a,b,c,d], [[a,b],[c,d]], [[a,b,c,d]] or a dict of corner keys."""
    if isinstance(value, dict):
        keys = {_norm_key(k): v for k, v in value.items()}
        for names in CORNER_KEYS:
            if all(n in keys for n in names):
                return _numbers(keys[n] for n in names)
        return None
    if not isinstance(value, (list, tuple)):
        return None
    if len(value) == 4:
        return _numbers(value)
    if len(value) == 2 and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        return _numbers([*value[0], *value[1]])
    if len(value) == 1:
        return _as_box(value[0])
    return None


def _norm_key(key: Any) -> str:
    """Key as written, minus quotes and whitespace (tiny tokenizers decode "bbox_2d" as " bbox _ 2d ")."""
    return re.sub(r"[\s'\"]", "", str(key)).lower()


def _walk_boxes(data: Any, out: list[list[float]]) -> None:
    if isinstance(data, dict):
        keys = {_norm_key(k): v for k, v in data.items()}
        for key in BOX_KEYS:
            if key in keys:
                box = _as_box(keys[key])
                if box is not None:
                    out.append(box)
                    return
                if isinstance(keys[key], (list, tuple)):  # several boxes under one key
                    before = len(out)
                    for item in keys[key]:
                        _walk_boxes(item, out)
                    if len(out) > before:
                        return
        corner = _as_box(data)
        if corner is not None:
            out.append(corner)
            return
        for v in data.values():
            _walk_boxes(v, out)
    elif isinstance(data, (list, tuple)):
        box = _as_box(data) if len(data) in (2, 4) and not any(isinstance(v, dict) for v in data) else None
        if box is not None:
            out.append(box)
            return
        for item in data:
            _walk_boxes(item, out)


def _json_candidates(text: str) -> list[str]:
    cands = [m.group(1) for m in _FENCE.finditer(text)]
    stripped = text.strip()
    cands.append(stripped)
    for open_ch, close_ch in (("[", "]"), ("{", "}")):
        start, end = stripped.find(open_ch), stripped.rfind(close_ch)
        if 0 <= start < end:
            cands.append(stripped[start : end + 1])
    return cands


def _loads(snippet: str) -> Any:
    for attempt in (snippet, snippet.replace("'", '"'), re.sub(r",\s*([\]}])", r"\1", snippet.replace("'", '"'))):
        try:
            return json.loads(attempt)
        except (ValueError, RecursionError):
            continue
    return None


def json_boxes(text: str) -> list[list[float]]:
    """Boxes from the first JSON structure in the text that contains any."""
    for cand in _json_candidates(text):
        data = _loads(cand)
        if data is None:
            continue
        out: list[list[float]] = []
        _walk_boxes(data, out)
        if out:
            return out
    return []


def bracket_boxes(text: str) -> list[list[float]]:
    return [[float(g) for g in m.groups()] for m in _BRACKET_BOX.finditer(text)]


def bare_boxes(text: str) -> list[list[float]]:
    return [[float(g) for g in m.groups()] for m in _BARE_BOX.finditer(text)]


def loc_boxes(text: str) -> list[list[float]]:
    """PaliGemma ``<locY1><locX1><locY2><locX2>`` groups, returned x-first: [x1, y1, x2, y2] in bins."""
    out = []
    for m in _LOC4.finditer(text):
        y1, x1, y2, x2 = (float(g) for g in m.groups())
        out.append([x1, y1, x2, y2])
    return out


def in_tags(open_tag: str, close_tag: str) -> Extractor:
    """Extractor reading boxes only inside the given tags (InternVL ``<box>``, DeepSeek ``<|det|>``)."""

    def extract(text: str) -> list[list[float]]:
        out: list[list[float]] = []
        for span in tagged(text, open_tag, close_tag):
            out.extend(json_boxes(span) or bracket_boxes(span) or bare_boxes(span) or _space_boxes(span))
        return out

    return extract


def _space_boxes(text: str) -> list[list[float]]:
    """``x1 y1 x2 y2`` with spaces only (MiniCPM-style ``<box>x1 y1 x2 y2</box>``)."""
    nums = re.findall(NUM, text)
    return [[float(v) for v in nums[:4]]] if len(nums) == 4 else []


GENERIC_BOX_EXTRACTORS: tuple[Extractor, ...] = (json_boxes, bracket_boxes, bare_boxes)


def first_boxes(text: str, extractors: Iterable[Extractor]) -> list[list[float]]:
    """Boxes from the first extractor that finds any (so a JSON answer is not mixed with prose numbers)."""
    for extract in extractors:
        found = extract(text)
        if found:
            return found
    return []


# --------------------------------------------------------------------------------------------------- points
def _walk_points(data: Any, out: list[list[float]]) -> None:
    if isinstance(data, dict):
        keys = {_norm_key(k): v for k, v in data.items()}
        for key in POINT_KEYS:
            if key in keys:
                before = len(out)
                _walk_points(keys[key], out)
                if len(out) > before:
                    return
        if "x" in keys and "y" in keys:
            pt = _numbers([keys["x"], keys["y"]])
            if pt is not None:
                out.append(pt)
                return
        for v in data.values():
            _walk_points(v, out)
    elif isinstance(data, (list, tuple)):
        if len(data) == 2:
            pt = _numbers(data)
            if pt is not None:
                out.append(pt)
                return
        for item in data:
            _walk_points(item, out)


def json_points(text: str) -> list[list[float]]:
    for cand in _json_candidates(text):
        data = _loads(cand)
        if data is None:
            continue
        out: list[list[float]] = []
        _walk_points(data, out)
        if out:
            return out
    return []


def bracket_points(text: str) -> list[list[float]]:
    return [[float(g) for g in m.groups()] for m in _BRACKET_POINT.finditer(text)]


# ------------------------------------------------------------------------------------------ Molmo 2 pointing
# Molmo 2 answers `<points coords="1 1 073 160 2 173 600" alt="...">label</points>`: per image (or frame) group, the
# image index (a timestamp for video), then `point-id x y` triples on a 0-1000 grid; groups are separated by ";".
_MOLMO_COORDS = re.compile(r"<(?:points|tracks)\b[^>]*?\bcoords=\"([0-9\t:;,. ]+)\"")


def molmo_points(text: str) -> list[list[float]]:
    """Every (x, y) of every `<points coords=...>` in the reply, in order."""
    out: list[list[float]] = []
    for coords in _MOLMO_COORDS.findall(text):
        for group in re.split(r"[;,]", coords):
            nums = re.findall(NUM, group)[1:]  # drop the image index / timestamp
            out.extend([float(nums[i + 1]), float(nums[i + 2])] for i in range(0, len(nums) - 2, 3))
    return out


def molmo_corner_boxes(text: str) -> list[list[float]]:
    """A box from the first two points (the two corners the box prompt asks Molmo 2 to point at)."""
    pts = molmo_points(text)
    return [pts[0] + pts[1]] if len(pts) >= 2 else []
