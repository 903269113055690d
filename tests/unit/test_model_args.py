"""Model args are checked at the door: one table (vrh_lmms.base.model_args) that the wrapper's constructor and the
commands' checks read; an unknown key, a bad `heads=`, `heads_file=` or `ablation=` is one line naming it, before
the checkpoint is looked at (a nonexistent `pretrained` path still reports the bad arg), so before any weight loads."""

from __future__ import annotations

import inspect
import json

import pytest

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.spec import check_spec_form
from vrh_lmms.base.model_args import HEAD_ARGS, VRH_MODEL_ARGS, check_model_args
from vrh_lmms.harness import preload

MISSING = "/nonexistent/checkpoint"


@pytest.fixture(scope="module")
def wrapper():
    from vrh_lmms.model_wrappers.qwen2_5_vl import VRHQwen25

    return VRHQwen25


def test_the_table_is_the_wrappers_signature(wrapper):
    from vrh_lmms.model_wrappers.base import VRHMixin

    params = inspect.signature(VRHMixin.__init__).parameters
    keywords = [n for n, p in params.items() if p.kind == p.KEYWORD_ONLY]
    assert keywords == list(VRH_MODEL_ARGS)
    assert preload.HEAD_ARGS == HEAD_ARGS and "heads" in HEAD_ARGS and "dtype" not in HEAD_ARGS


def test_an_unknown_key_names_the_close_one():
    with pytest.raises(VRHError, match=r"model arg heads_fil='x' is not one that m takes \(did you mean "
                                       r"'heads_file' or .*\?\); it takes: .*pretrained"):
        check_model_args({"heads_fil": "x"}, ["pretrained"], "m")
    check_model_args({"heads": "top3", "pretrained": "p", "batch_size": 1}, ["pretrained"], "m")


@pytest.mark.parametrize("spec", ["none", "top5", "random3@all", "random20:skip_layer0", "like:top4",
                                  "layer_matched4", "image_matched:top2~0.02", "random_outside:top3", "L1H2;L0H0"])
def test_good_spec_forms_pass(spec):
    check_spec_form(spec)


@pytest.mark.parametrize("spec, match", [("topp5", "bad head spec token 'topp5'"), ("L1H2;L1H2", "more than once"),
                                         ("L1H2;Lx", "'Lx'")])
def test_bad_spec_forms_are_named(spec, match):
    with pytest.raises(VRHError, match=match):
        check_spec_form(spec)


def _refused(cls, match: str, **kwargs) -> str:
    with pytest.raises(VRHError, match=match) as info:
        cls(pretrained=MISSING, **kwargs)
    assert "\n" not in str(info.value) and MISSING not in str(info.value)
    return str(info.value)


def test_the_wrapper_refuses_bad_args_before_the_checkpoint(wrapper, tmp_path):
    _refused(wrapper, r"model arg heads_fil=.*did you mean 'heads_file'", heads_fil="h.json")
    _refused(wrapper, r"model arg max_pixel=.*did you mean 'max_pixels'", max_pixel=100)
    _refused(wrapper, r"bad head spec token 'topp3'", heads="topp3")
    _refused(wrapper, r"model arg ablation='zeroo': ablation mode 'zeroo' unknown", ablation="zeroo")
    _refused(wrapper, r"model arg ablation_method='fast'", ablation_method="fast")
    _refused(wrapper, r"model arg seed='x': expected a whole number", seed="x")
    _refused(wrapper, r"model arg control_pool= 'some'", control_pool="some")
    bad = tmp_path / "heads.json"
    bad.write_text(json.dumps({"schema": "vrh-heads/1", "model": {"id": "m"},
                               "geometry": {"layers": 1, "heads": 2, "kv_heads": 1, "head_dim": 4},
                               "scores": [[float("nan"), 0.1]], "ranking": ["L0H1", "L0H0"]}))
    _refused(wrapper, r"heads\.json: field 'scores' of L0H0 is nan", heads="top1", heads_file=str(bad))
    _refused(wrapper, r"heads file .* does not exist", heads="top1", heads_file=str(tmp_path / "none.json"))
    # with good args the checkpoint itself is what is refused
    with pytest.raises(VRHError, match=r"pretrained="):
        wrapper(pretrained=MISSING, heads="L0H1")


def test_the_commands_check_refuses_an_unknown_key_before_the_path():
    with pytest.raises(VRHError, match=r"model arg heads_fil=.*'heads_file'"):
        preload.plan_args("vrh_qwen25", f"pretrained={MISSING},heads_fil=x")
    with pytest.raises(VRHError, match=r"pretrained="):
        preload.plan_args("vrh_qwen25", f"pretrained={MISSING},max_pixels=100")
    # an arg that a mixin before VRHMixin takes itself (Qwen2.5-VL's image_position) is known too
    with pytest.raises(VRHError, match=r"pretrained="):
        preload.plan_args("vrh_qwen25", f"pretrained={MISSING},image_position=after_prompt")
