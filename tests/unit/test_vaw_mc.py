"""VAW as multiple choice (tasks/common/vaw_mc.py) on the real VAW taxonomy files (adobe-research/vaw_dataset
data/attribute_types.json and attribute_parent_types.json, tests/fixtures/real_excerpts) and instances in VAW's
published schema (the README's example instance, and instances drawn from the real vocabulary)."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from vrh_lmms.tasks.common.vaw_mc import LETTERS, VAWMCError, VAWMCRule, build_question, build_questions, counts
from vrh_lmms.tasks.common.vqa_data import VAWTypes

REAL = Path(__file__).parents[1] / "fixtures" / "real_excerpts"


@pytest.fixture(scope="module")
def types() -> VAWTypes:
    return VAWTypes(json.loads((REAL / "vaw_attribute_types.json").read_text()),
                    json.loads((REAL / "vaw_attribute_parent_types.json").read_text()))


def _instance(i: int, positives: list[str], negatives: list[str]) -> dict:
    # VAW's JSON: ids as strings (README example), bbox [x, y, w, h] in pixels
    return {"image_id": str(2370000 + i), "instance_id": f"{2370000 + i}00{i % 10}",
            "instance_bbox": [1.0, 2.0, 30.0, 40.0], "instance_polygon": None, "object_name": "shirt",
            "positive_attributes": positives,
            "negative_attributes": negatives}


def _random_instances(types: VAWTypes, n: int, seed: int = 1) -> list[dict]:
    """Instances with random labels from the real vocabulary; some list a positive among their negatives too
    (a contradictory label), which must still never become a distractor."""
    rng = random.Random(seed)
    words = sorted({a for attrs in types.subtypes.values() for a in attrs})
    colors = types.subtypes["color"]
    out = []
    for i in range(n):
        pos = rng.sample(colors, rng.randint(1, 2)) + rng.sample(words, rng.randint(0, 3))
        neg = rng.sample(colors, rng.randint(0, 8)) + rng.sample(words, rng.randint(0, 6))
        if i % 7 == 0:
            neg.append(pos[0])
        out.append(_instance(i, pos, neg))
    return out


def test_readme_instance_qualifies_only_with_vocabulary_distractors(types):
    inst = json.loads((REAL / "vaw_readme_instance.json").read_text())
    # gray is its one eligible positive (color); maroon is its only labelled color negative: 1 < 3 distractors
    assert build_question(inst, types, VAWMCRule()) is None
    q = build_question(inst, types, VAWMCRule(distractors="vocabulary"))
    assert q is not None and q.instance_id == "2373241004" and q.image_id == "2373241"
    assert (q.subtype, q.parent) in {("color", "color"), ("material", "material")}  # gray / tiled
    assert q.answer in {"gray", "tiled"} and not set(q.options) & {"light colored", "tiled", "gray"} - {q.answer}


def test_distractors_are_the_labelled_negatives_of_the_answers_type(types):
    inst = _instance(0, ["red", "wooden"], ["blue", "green", "yellow", "metal", "striped"])
    q = build_question(inst, types, VAWMCRule())
    assert q.subtype == "color" and q.parent == "color" and q.answer == "red"  # wooden has one material negative
    assert sorted(q.options) == ["blue", "green", "red", "yellow"]
    assert q.options[LETTERS.index(q.answer_letter)] == "red"
    assert q.prompt("\nSUFFIX") == ("What is the color of the shirt in the red box?\n"
                                    + "\n".join(f"{L}. {o}" for L, o in zip("ABCD", q.options)) + "\nSUFFIX")
    assert q.question(boxed=False) == "What is the color of the shirt?"


def test_never_offers_a_positive_attribute_as_a_distractor(types):
    instances = _random_instances(types, 400)
    for rule in (VAWMCRule(), VAWMCRule(distractors="vocabulary"), VAWMCRule(options=6, parents=("color",))):
        questions = build_questions(instances, types, rule)
        assert len(questions) > 50
        by_id = {i["instance_id"]: i for i in instances}
        for q in questions:
            inst = by_id[q.instance_id]
            assert set(q.options) & set(inst["positive_attributes"]) == {q.answer}
            assert len(set(q.options)) == rule.options
            assert all(types.of(o)[1] == q.subtype for o in q.options)
            assert q.parent in rule.parents
            if rule.distractors == "negatives":
                assert set(q.options) - {q.answer} <= set(inst["negative_attributes"])


def test_answer_letter_is_where_the_record_says_and_spread_evenly(types):
    questions = build_questions(_random_instances(types, 600), types, VAWMCRule(distractors="vocabulary"))
    for q in questions:
        assert q.options[LETTERS.index(q.answer_letter)] == q.answer
    spread = Counter(q.answer_letter for q in questions)
    assert set(spread) == set("ABCD")
    assert all(0.18 < spread[x] / len(questions) < 0.32 for x in "ABCD"), spread


def test_deterministic_under_its_seed_and_independent_of_order(types):
    instances = _random_instances(types, 300)
    rule = VAWMCRule(distractors="vocabulary")
    first = build_questions(instances, types, rule)
    assert first == build_questions(instances, types, rule)
    assert sorted(build_questions(instances[::-1], types, rule), key=lambda q: q.instance_id) == \
        sorted(first, key=lambda q: q.instance_id)
    other = build_questions(instances, types, VAWMCRule(distractors="vocabulary", seed=1))
    assert [q.instance_id for q in other] == [q.instance_id for q in first]  # which instances qualify: no seed
    assert sum(a != b for a, b in zip(first, other)) > len(first) // 2  # the draws do depend on the seed


def test_counts_and_rule_settings(types):
    instances = _random_instances(types, 200)
    qs = build_questions(instances, types, VAWMCRule())
    c = counts(qs, len(instances))
    assert c["questions"] == len(qs) == sum(c["per_parent"].values()) == sum(c["answer_letters"].values())
    assert VAWMCRule.from_json('{"options": 3, "parents": ["color"], "seed": 4}') == \
        VAWMCRule(options=3, parents=("color",), seed=4)
    with pytest.raises(VAWMCError, match="unknown key.*colour"):
        VAWMCRule.from_json('{"colour": 1}')
    with pytest.raises(VAWMCError, match="options must be int, got '4'"):
        VAWMCRule.from_json('{"options": "4"}')
    with pytest.raises(VAWMCError, match="parents must be a list"):
        VAWMCRule.from_json('{"parents": "color"}')
    with pytest.raises(VAWMCError, match="not JSON"):
        VAWMCRule.from_json("{options: 4}")
    with pytest.raises(VAWMCError, match="options=1"):
        VAWMCRule(options=1)
    with pytest.raises(VAWMCError, match="distractors='random'"):
        VAWMCRule(distractors="random")
    with pytest.raises(VAWMCError, match="parent type.*colour"):
        build_questions(instances, types, VAWMCRule(parents=("colour",)))
