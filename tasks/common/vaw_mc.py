"""VAW as multiple choice: one seeded question per qualifying instance (the paper's Table 3 uses VAW "converted to
multiple choice"; it does not say how, so this module is our documented construction).

The rule (``VAWMCRule``, every field a setting):

1. An attribute's type is its VAW subtype as the official evaluator assigns it (``VAWTypes.of``: the first subtype
   in ``attribute_types.json`` listing it, then its parent in ``attribute_parent_types.json``), so each attribute
   has exactly one type (``dark`` -> ``tone`` / ``color``, never ``brightness``).
2. Eligible types: subtypes whose parent is in ``rule.parents`` (default color, material, shape, texture: how the
   object itself looks), minus ``rule.exclude_subtypes``.
3. An instance qualifies for a type when it has at least one *positive* attribute of that type and at least
   ``options - 1`` distractor candidates of that type. Candidates (``rule.distractors``):
   ``negatives`` (default): the instance's *labelled negative* attributes of that type, i.e. attributes annotators
   marked absent, so no distractor can be a true but unlabelled attribute; ``vocabulary``: every attribute of that
   type in the taxonomy that is not one of the instance's positives (more questions, some distractors may be true
   but unlabelled). Either way the instance's positive attributes are never candidates.
4. One question per qualifying instance: a generator seeded by ``(rule.seed, instance_id)`` picks the type among
   the qualifying ones (sorted), the answer among that type's positives (sorted), ``options - 1`` distractors among
   the candidates (sorted), and the answer's position (uniform over the letters). Seeding per instance makes a
   question independent of file order and of which other instances are present.

The question: "What is the {subtype} of the {object} in the red box?" with options "A. ..", one per line, and the
suffix the other multiple-choice sets use. ``python -m vrh_lmms.tasks.common.vqa_paper VAW_ROOT`` prints the
counts the rule gives on a real split (JSON files only; no images needed).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from vrh_lmms.tasks.common.vqa_data import VAWTypes

LETTERS = "ABCDEFGHIJ"
DISTRACTOR_POOLS = ("negatives", "vocabulary")


class VAWMCError(ValueError):
    """A bad VAW multiple-choice rule; the message names the setting."""


@dataclass(frozen=True)
class VAWMCRule:
    parents: tuple[str, ...] = ("color", "material", "shape", "texture")
    exclude_subtypes: tuple[str, ...] = ()
    options: int = 4
    distractors: str = "negatives"
    seed: int = 0
    split: str = "test"

    def __post_init__(self) -> None:
        if not 2 <= self.options <= len(LETTERS):
            raise VAWMCError(f"VAW multiple choice: options={self.options} must be between 2 and {len(LETTERS)}")
        if self.distractors not in DISTRACTOR_POOLS:
            raise VAWMCError(f"VAW multiple choice: distractors={self.distractors!r}: use one of "
                             f"{', '.join(DISTRACTOR_POOLS)}")
        if not self.parents:
            raise VAWMCError("VAW multiple choice: parents is empty (name at least one VAW parent type)")

    @classmethod
    def from_json(cls, text: str | Mapping[str, Any] | None) -> VAWMCRule:
        """A rule from JSON text or a mapping (``VRH_VAW_MC``); unknown keys are an error naming them."""
        if not text:
            return cls()
        try:
            data = json.loads(text) if isinstance(text, str) else dict(text)
        except ValueError as err:
            raise VAWMCError(f"VRH_VAW_MC is not JSON ({err})") from None
        if not isinstance(data, dict):
            raise VAWMCError(f"VRH_VAW_MC must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise VAWMCError(f"VRH_VAW_MC: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        for key in ("parents", "exclude_subtypes"):
            if key in data:
                if not isinstance(data[key], list) or not all(isinstance(x, str) for x in data[key]):
                    raise VAWMCError(f"VRH_VAW_MC: {key} must be a list of type names, got {data[key]!r}")
                data[key] = tuple(data[key])
        for key, kind in (("options", int), ("seed", int), ("distractors", str), ("split", str)):
            if key in data and (not isinstance(data[key], kind) or isinstance(data[key], bool)):
                raise VAWMCError(f"VRH_VAW_MC: {key} must be {kind.__name__}, got {data[key]!r}")
        return cls(**data)

    def as_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


@dataclass(frozen=True)
class MCQuestion:
    """One multiple-choice question about one VAW instance."""

    instance_id: str
    image_id: str
    object_name: str
    box_xywh: tuple[float, float, float, float]
    subtype: str
    parent: str
    answer: str
    options: tuple[str, ...]
    answer_letter: str
    positives: tuple[str, ...] = field(default=())

    def question(self, boxed: bool = True) -> str:
        """The question; ``boxed`` when the instance is outlined in red on the whole image (else it is cropped)."""
        where = " in the red box" if boxed else ""
        return f"What is the {self.subtype} of the {self.object_name}{where}?"

    def prompt(self, suffix: str, boxed: bool = True) -> str:
        """Question, one "A. option" line per option, then ``suffix`` (the multiple-choice instruction)."""
        lines = "\n".join(f"{LETTERS[i]}. {opt}" for i, opt in enumerate(self.options))
        return f"{self.question(boxed)}\n{lines}{suffix}"


def eligible_subtypes(types: VAWTypes, rule: VAWMCRule) -> dict[str, str]:
    """subtype -> parent for the subtypes the rule asks about (in taxonomy order)."""
    unknown = [p for p in rule.parents if p not in types.parents]
    if unknown:
        raise VAWMCError(f"VAW multiple choice: parent type(s) {', '.join(unknown)} not in "
                         f"attribute_parent_types.json ({', '.join(types.parents)})")
    out: dict[str, str] = {}
    for parent in rule.parents:
        for sub in types.parents[parent]:
            if sub not in rule.exclude_subtypes and sub not in out:
                out[sub] = parent
    return out


def vocabulary(types: VAWTypes) -> dict[str, list[str]]:
    """subtype -> attributes whose (evaluator-assigned) type is that subtype, in file order."""
    vocab: dict[str, list[str]] = {}
    seen: set[str] = set()
    for attrs in types.subtypes.values():
        for attr in attrs:
            if attr not in seen:
                seen.add(attr)
                vocab.setdefault(types.of(attr)[1], []).append(attr)
    return vocab


def build_question(inst: Mapping[str, Any], types: VAWTypes, rule: VAWMCRule,
                   vocab: Mapping[str, list[str]] | None = None) -> MCQuestion | None:
    """The instance's question under ``rule``, or None when it does not qualify (rule 3)."""
    subtypes = eligible_subtypes(types, rule)
    positives = [str(a) for a in inst.get("positive_attributes") or []]
    negatives = [str(a) for a in inst.get("negative_attributes") or []]
    pos_set = set(positives)
    by_type_pos: dict[str, set[str]] = {}
    for attr in positives:
        sub = types.of(attr)[1]
        if sub in subtypes:
            by_type_pos.setdefault(sub, set()).add(attr)
    if rule.distractors == "negatives":
        pool: dict[str, set[str]] = {}
        for attr in negatives:
            sub = types.of(attr)[1]
            if sub in by_type_pos and attr not in pos_set:
                pool.setdefault(sub, set()).add(attr)
    else:
        words = vocab if vocab is not None else vocabulary(types)
        pool = {sub: {a for a in words.get(sub, []) if a not in pos_set} for sub in by_type_pos}
    need = rule.options - 1
    qualifying = sorted(sub for sub in by_type_pos if len(pool.get(sub, ())) >= need)
    if not qualifying:
        return None
    rng = random.Random(f"vaw-mc:{rule.seed}:{inst['instance_id']}")
    sub = rng.choice(qualifying)
    answer = rng.choice(sorted(by_type_pos[sub]))
    chosen = rng.sample(sorted(pool[sub]), need)
    position = rng.randrange(rule.options)
    options = chosen[:position] + [answer] + chosen[position:]
    x, y, w, h = (float(v) for v in inst["instance_bbox"])
    return MCQuestion(instance_id=str(inst["instance_id"]), image_id=str(inst["image_id"]),
                      object_name=str(inst["object_name"]).strip(), box_xywh=(x, y, w, h), subtype=sub,
                      parent=subtypes[sub], answer=answer, options=tuple(options), answer_letter=LETTERS[position],
                      positives=tuple(positives))


def build_questions(instances: Iterable[Mapping[str, Any]], types: VAWTypes, rule: VAWMCRule) -> list[MCQuestion]:
    """Questions for every qualifying instance, in input order."""
    vocab = vocabulary(types) if rule.distractors == "vocabulary" else None
    out = []
    for inst in instances:
        q = build_question(inst, types, rule, vocab)
        if q is not None:
            out.append(q)
    return out


def counts(questions: list[MCQuestion], n_instances: int) -> dict[str, Any]:
    """How many questions the rule gives, overall and per parent and subtype, and the answer-letter spread."""
    return {"instances": n_instances, "questions": len(questions),
            "per_parent": dict(Counter(q.parent for q in questions).most_common()),
            "per_subtype": dict(Counter(q.subtype for q in questions).most_common()),
            "answer_letters": dict(sorted(Counter(q.answer_letter for q in questions).items()))}
