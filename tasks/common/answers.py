"""Rule-based answer extraction for VQA tasks: option letters, yes/no, numbers (no LLM judge).

Every extractor returns None when it cannot read an answer; the task records that as a parse failure.
Replies are first reduced to their answer part (reasoning blocks and GLM box tokens removed).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from vrh_lmms.base.boxes.extract import focus

NUMBER_WORDS = {w: i for i, w in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
     "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"])}
_NUM = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_ANSWER_CUE = re.compile(r"(?:final answer|answer|ans)\s*(?:is|:|=)?\s*[:\-]?\s*", re.IGNORECASE)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def answer_text(reply: str | None) -> str:
    """The answer part of a reply, stripped; text after an 'Answer:' cue when there is one."""
    text = focus(reply or "").strip()
    cues = list(_ANSWER_CUE.finditer(text))
    if cues:
        tail = text[cues[-1].end():].strip()
        if tail:
            return tail
    return text


def normalize_text(text: str) -> str:
    text = re.sub(r"[^\w\s.-]", " ", (text or "").lower())
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.replace("_", " ").split()).strip(" .")


# ------------------------------------------------------------------------------------------------ choices
def extract_choice(reply: str | None, letters: Sequence[str], options: Sequence[str] = ()) -> str | None:
    """The chosen option letter: a bare/parenthesised letter, an 'answer is X' cue, or an option's text."""
    text = answer_text(reply)
    if not text:
        return None
    valid = "".join(sorted({str(letter).upper() for letter in letters}))
    if not valid:
        return None
    cls = f"[{re.escape(valid)}]"
    bare = text.strip().strip("().:").strip()
    if len(bare) == 1 and bare.upper() in valid:
        return bare.upper()
    m = re.match(rf"\s*\(?({cls})\)?[.:)]", text)  # "B.", "(B) text", "B: text"
    if m:
        return m.group(1)
    m = re.search(rf"(?:option|choice)\s*\(?({cls})\)?(?![A-Za-z])", text, flags=re.IGNORECASE)
    if m:
        return m.group(1).upper()
    parenthesised = set(re.findall(rf"\(({cls})\)", text))
    if len(parenthesised) == 1:
        return parenthesised.pop()
    norm = normalize_text(text)
    if options:
        hits = {letters[i].upper() for i, opt in enumerate(options)
                if normalize_text(str(opt)) and re.search(rf"(?<!\w){re.escape(normalize_text(str(opt)))}(?!\w)", norm)}
        if len(hits) == 1:
            return hits.pop()
    singles = set(re.findall(rf"(?<![A-Za-z]){cls}(?![A-Za-z])", text))
    return singles.pop() if len(singles) == 1 else None


# ------------------------------------------------------------------------------------------------ yes / no
def extract_yes_no(reply: str | None) -> str | None:
    """'yes' or 'no' (true/false count too): the first such word of the answer part."""
    m = re.search(r"\b(yes|no|true|false)\b", answer_text(reply).lower())
    if not m:
        return None
    return "yes" if m.group(1) in ("yes", "true") else "no"


def yes_no_of(value) -> str | None:
    """Targets: 'True'/'False'/'yes'/'no'/1/0 -> 'yes'/'no' (None if not a yes/no value)."""
    low = str(value).strip().lower()
    if low in ("yes", "true", "1"):
        return "yes"
    if low in ("no", "false", "0"):
        return "no"
    return None


# ------------------------------------------------------------------------------------------------ numbers
def extract_number(reply: str | None, prefer: str = "first") -> float | None:
    """A number from the answer part: digits (1,234.5) or a number word; ``prefer`` first or last occurrence."""
    text = answer_text(reply)
    found = [(m.start(), float(m.group(0).replace(",", ""))) for m in re.finditer(_NUM, text)]
    found += [(m.start(), float(NUMBER_WORDS[m.group(1)]))
              for m in re.finditer(rf"\b({'|'.join(NUMBER_WORDS)})\b", text.lower())]
    if not found:
        return None
    found.sort()
    return found[0][1] if prefer == "first" else found[-1][1]


def round_to(value: float, precision: float | None) -> float:
    digits = int(precision) if precision is not None and not (isinstance(precision, float) and math.isnan(precision)) \
        else 0
    return round(float(value), digits)


def extract_list(reply: str | None) -> list[float] | None:
    """A bracketed list of numbers ``[1, 2.5, 3]`` (MathVista list answers)."""
    num = r"[-+]?\d+(?:\.\d+)?"
    m = re.search(rf"\[\s*({num}(?:\s*,\s*{num})*)\s*\]", answer_text(reply))
    return None if not m else [float(v) for v in re.findall(num, m.group(1))]
