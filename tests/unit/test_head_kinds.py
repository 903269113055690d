"""The table of head-set kinds (vrh_lmms.base.heads.kinds): every kind's spec string round-trips through its parser
and formatter, the table's draws are the draw functions' own for the same seeds (tests/unit/test_head_draws_frozen.py
compares them with an older commit's draws), a kind missing a field is refused, and the pool a plan is given is
carried by its configurations to the draws."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import kinds
from vrh_lmms.base.heads.controls import image_matched_heads
from vrh_lmms.base.heads.draws import ControlUnavailable, layer_matched_heads, random_heads
from vrh_lmms.base.heads.geometry import Geometry, HeadRef
from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores
from vrh_lmms.base.heads.spec import resolve_spec

G = Geometry(layers=5, heads=8, kv_heads=8, head_dim=4)
SEEDS = (0, 1, 2, 3, 7)


def _heads_file() -> HeadsFile:
    rng = np.random.default_rng(11)
    scores, mass = rng.random((G.layers, G.heads)), rng.random((G.layers, G.heads))
    return HeadsFile({"id": "kinds"}, G, scores, ranking_from_scores(scores),
                     extra={"image_mass": {"scores": mass.tolist()}})


HF = _heads_file()
DEAD = (HeadRef(0, 1), HeadRef(2, 3), HeadRef(2, 5), HeadRef(4, 0))
OPTIONS = {"random": {"skip_layer0": True}, "image_matched": {"tolerance": 0.3},
           "explicit": {"heads": (HeadRef(0, 2), HeadRef(3, 1))}}


@pytest.mark.parametrize("kind", [k for k in kinds.KINDS if k.spec], ids=lambda k: k.name)
@pytest.mark.parametrize("with_options", [False, True])
def test_each_kind_round_trips_spec_parse_format(kind, with_options):
    for k in (1, 4, 12):
        # explicit heads are their only option; the other kinds are written with and without theirs
        options = OPTIONS.get(kind.name, {}) if with_options or kind.spec.read else {}
        text = kinds.format_spec(kind, k, **options)
        parsed = kinds.parse_spec(text)
        expected_k = len(options["heads"]) if "heads" in options else (0 if kind.name == "baseline" else k)
        assert (parsed.kind, parsed.k, parsed.pool) == (kind, expected_k, None), text
        assert kinds.format_spec(parsed.kind, parsed.k, **parsed.options) == text
        for pool in kinds.POOLS:  # a pool suffix is read apart from the spec
            suffixed = kinds.parse_spec(f"{text}@{pool}")
            assert (suffixed.kind, suffixed.k, suffixed.pool) == (kind, expected_k, pool)


@pytest.mark.parametrize("kind", [k for k in kinds.KINDS if k.draws_as], ids=lambda k: k.name)
def test_a_variant_is_written_as_its_base_kind_with_its_own_pool(kind):
    parsed = kinds.parse_spec(kinds.format_spec(kind, 5, skip_layer0=True, tolerance=0.2))
    assert (parsed.kind, parsed.k, parsed.pool) == (kind.base, 5, kind.pool) and not parsed.options


@pytest.mark.parametrize("alias, name", [("layer_matched5", "layer_matched"), ("random_like:top5", "layer_matched"),
                                         ("random-like=top5", "layer_matched"), ("random_outside5", "random_outside"),
                                         ("image_matched5", "image_matched"), ("TOP5", "topk"), ("None", "baseline")])
def test_aliases_parse_to_their_kind(alias, name):
    assert kinds.parse_spec(alias).kind.name == name


def _old_draw(name: str, k: int, seed: int, exclude: frozenset[HeadRef]) -> list[HeadRef]:
    """What the draw functions give for a kind, called directly (the draws the table must call, not copy)."""
    top = HF.ranking[:k]
    if name == "topk":
        return top
    if name == "random":
        return random_heads(G, k, seed, exclude)
    if name == "layer_matched":
        return layer_matched_heads(top, G, seed, exclude)
    if name == "random_outside":
        return random_heads(G, k, seed, exclude | frozenset(top))
    if name == "image_matched":
        return image_matched_heads(HF.ranking, HF.image_mass(), G, k, seed, kinds.IMAGE_MATCH_TOLERANCE, exclude)
    raise AssertionError(name)


@pytest.mark.parametrize("name", ["topk", "random", "layer_matched", "random_outside", "image_matched"])
@pytest.mark.parametrize("pool", kinds.POOLS)
def test_the_table_draws_what_the_draw_functions_draw(name, pool):
    exclude = frozenset(DEAD) if pool == kinds.LIVE else frozenset()
    drawn_sets = set()
    for seed in SEEDS:
        for k in (2, 3):
            spec = kinds.format_spec(name, k)
            try:
                old = _old_draw(name, k, seed, exclude)
            except ControlUnavailable:
                with pytest.raises(ControlUnavailable):
                    resolve_spec(spec, G, heads_file=HF, seed=seed, dead=DEAD, pool=pool)
                continue
            hs = resolve_spec(spec, G, heads_file=HF, seed=seed, dead=DEAD, pool=pool)
            assert list(hs.heads) == sorted(old), (spec, seed, pool)
            assert hs.kind == name and hs.k == k
            assert (hs.seed, hs.pool) == ((seed, pool) if kinds.kind(name).control else (None, None))
            drawn_sets.add(hs.heads)
    # the comparison can tell seeds apart: a control's seeds give different sets
    assert len(drawn_sets) > (2 if kinds.kind(name).control else 1)


def test_a_kind_missing_a_field_is_refused():
    layer_matched = kinds.kind("layer_matched")
    for field in ("label", "legend", "column", "colour", "id_prefix"):
        with pytest.raises(VRHError, match=f"'layer_matched': a control needs {field}"):
            dataclasses.replace(layer_matched, **{field: None})
    with pytest.raises(VRHError, match="draw is missing"):
        dataclasses.replace(layer_matched, draw=None)
    with pytest.raises(VRHError, match="plan_flag or option"):
        dataclasses.replace(layer_matched, plan_flag=None)
    with pytest.raises(VRHError, match="either its spec"):
        dataclasses.replace(layer_matched, spec=None)
    with pytest.raises(VRHError, match="option_help is missing"):
        dataclasses.replace(kinds.kind("image_matched"), option_help=None)
    fields = {f.name: getattr(layer_matched, f.name) for f in dataclasses.fields(kinds.Kind)}
    with pytest.raises(TypeError, match="colour"):  # every field must be given, None where it does not apply
        kinds.Kind(**{k: v for k, v in fields.items() if k != "colour"})
    with pytest.raises(VRHError, match="id_prefix 'layer_matched' twice"):
        kinds.check_table([*kinds.KINDS, dataclasses.replace(layer_matched, name="layer_matched_twin", option=None)])
    with pytest.raises(VRHError, match="draws_as 'nothing'"):
        kinds.check_table([*kinds.KINDS, dataclasses.replace(kinds.kind("random_all"), name="x", id_prefix="x",
                                                             draws_as="nothing")])


def test_planned_ids_read_back_as_their_kind():
    from vrh_lmms.base.heads.plan import plan_configurations

    pattern = kinds.id_pattern()
    plan = plan_configurations([3, 12], 2, True, ["zero", "mean"], controls=list(kinds.OPTIONS), uniform_random=True)
    controls = [c for c in plan if kinds.kind(c.kind).control]
    assert {c.kind for c in controls} == set(kinds.CONTROLS)
    for c in plan:
        m = pattern.match(c.id)
        if kinds.kind(c.kind).id_prefix is None:
            assert m is None, c.id
            continue
        assert (m["kind"], int(m["k"]), m["mode"] or "zero") == (kinds.kind(c.kind).id_prefix, c.k, c.mode), c.id
        assert (None if m["seed"] is None else int(m["seed"])) == c.seed


def test_the_plan_carries_its_pool_to_every_draw():
    from vrh_lmms.base.heads.plan import carried_pool, plan_configurations, planned_headset
    from vrh_lmms.runs.sweep.run import SweepSpec

    for pool in kinds.POOLS:
        plan = plan_configurations([2], 3, True, ["zero"], uniform_random=True, pool=pool)
        assert carried_pool(plan) == pool
        assert {c.pool for c in plan if c.kind != "random_all"} == {pool}
        assert {c.pool for c in plan if c.kind == "random_all"} == {kinds.ALL}
        for c in plan:
            try:
                expected = resolve_spec(c.spec, G, heads_file=HF, seed=c.seed or 0, dead=DEAD, pool=pool)
            except ControlUnavailable:
                continue
            assert planned_headset(c, G, HF, DEAD) == expected
        assert SweepSpec("m", "", ["t"], None, plan).control_pool == pool
        assert all("pool" not in c.to_dict() for c in plan)  # manifests keep their keys
    with pytest.raises(VRHError, match="the all and the live pools"):
        SweepSpec("m", "", ["t"], None, plan_configurations([2], 1, False, ["zero"], pool=kinds.ALL),
                  control_pool=kinds.LIVE)


def test_a_runs_head_sets_are_resolved_once_and_handed_forward(monkeypatch):
    """A sweep's checks resolve every configuration against the heads file's geometry, the checkpoint's and the
    loaded model's; where those and the dead heads agree, each head set is drawn once and the run uses that one."""
    from vrh_lmms.base.heads import plan as plan_module
    from vrh_lmms.base.heads.plan import HeadSets, check_headsets, plan_configurations, planned_headset

    calls = []
    real = plan_module.resolve_spec
    monkeypatch.setattr(plan_module, "resolve_spec", lambda *a, **kw: calls.append(a[0]) or real(*a, **kw))
    configs = plan_configurations([2], 3, True, ["zero"])
    headsets = HeadSets(HF)
    for _ in range(3):  # heads file, config.json, loaded model: the same shape and dead heads
        check_headsets(configs, G, HF, DEAD, headsets=headsets)
    assert len(calls) == len(configs) == len(headsets)
    for c in configs:  # what the run evaluates: the checks' head sets, the very draws planned_headset makes
        assert headsets.get(c, G, DEAD) == planned_headset(c, G, HF, DEAD)
    assert len(calls) == 2 * len(configs)  # (the comparison's own planned_headset calls)
    check_headsets(configs, G, HF, (), headsets=headsets)  # other dead heads: drawn again
    assert len(headsets) == 2 * len(configs)
