"""Which convention a task uses: env > task kwarg > active wrapper > model-name mapping > generic."""

from __future__ import annotations

import pytest

from vrh_lmms.base.boxes import context


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    monkeypatch.delenv(context.ENV_VAR, raising=False)
    context.clear_active()
    yield
    context.clear_active()


MAPPED = {"convention": "qwen2_5_vl", "default": {"convention": "generic"}}


def test_default_is_generic():
    r = context.resolve(None)
    assert (r.name, r.source) == ("generic", "default")


def test_model_name_mapping():
    r = context.resolve(MAPPED)
    assert (r.name, r.source) == ("qwen2_5_vl", "model")
    assert r.params["min_pixels"] == 256 * 28 * 28 and r.params["max_pixels"] == 1605632


def test_active_wrapper_beats_mapping_and_brings_params():
    context.set_active("qwen2_5_vl", min_pixels=50176, max_pixels=50176)
    r = context.resolve(MAPPED)
    assert (r.name, r.source) == ("qwen2_5_vl", "active")
    assert (r.params["min_pixels"], r.params["max_pixels"]) == (50176, 50176)
    context.set_active("internvl", min_pixels=1)  # params a family does not use are ignored
    r = context.resolve(MAPPED)
    assert (r.name, r.params) == ("internvl", {})


def test_task_kwarg_beats_active():
    context.set_active("qwen2_5_vl")
    r = context.resolve({**MAPPED, "box_convention": "internvl"})
    assert (r.name, r.source) == ("internvl", "task")


def test_env_beats_everything_and_takes_params(monkeypatch):
    context.set_active("internvl")
    monkeypatch.setenv(context.ENV_VAR, "qwen2_5_vl:max_pixels=12845056,fetch=false")
    r = context.resolve({**MAPPED, "box_convention": "internvl"})
    assert (r.name, r.source) == ("qwen2_5_vl", "env")
    assert r.params["max_pixels"] == 12845056 and r.params["fetch"] is False


def test_same_name_sources_fill_params(monkeypatch):
    context.set_active("qwen2_5_vl", min_pixels=3136)
    monkeypatch.setenv(context.ENV_VAR, "qwen2_5_vl:max_pixels=999999")
    r = context.resolve(None)
    assert r.source == "env" and r.params["min_pixels"] == 3136 and r.params["max_pixels"] == 999999


@pytest.mark.parametrize("spec,match", [("nope", "unknown box convention"), ("qwen2_5_vl:max_pixel=3", "no parameter"),
                                        ("qwen2_5_vl:oops", "key=value")])
def test_bad_env_spec_names_the_variable(monkeypatch, spec, match):
    monkeypatch.setenv(context.ENV_VAR, spec)
    with pytest.raises(ValueError, match=match) as err:
        context.resolve(None)
    assert context.ENV_VAR in str(err.value)


def test_bad_names_are_refused():
    with pytest.raises(ValueError, match="unknown box convention 'qwen9'"):
        context.set_active("qwen9")
    with pytest.raises(ValueError, match="box_convention"):
        context.resolve({"box_convention": "qwen9"})
    with pytest.raises(ValueError, match="box_params"):
        context.resolve({"box_convention": "qwen2_5_vl", "box_params": {"max_pixel": 1}})


def test_remember_and_recall():
    r = context.resolve(MAPPED)
    context.remember("task#0", r)
    assert context.recall("task#0") is r and context.recall("task#1") is None
