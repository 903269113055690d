"""`vrh.load("<folder>")` takes a checkpoint of every registered family (`vrh-lmms make-tiny`) and of a model type no
family claims (a tiny VipLLaVA from the generic shrinker, through `vrh_hf`): the `vrh_*` model it picks is the
family's (the one `vrh-lmms demo --pretrained` picks, one shared function), the Hugging Face class is the family's,
the geometry is the config's, and `vrh.ablate` cuts exactly the named head at its decoder layer's output projection
(against the projection of the input with that head's slice zeroed by hand) and leaves it intact after.
"""

from __future__ import annotations

import pytest
import torch

from vrh_lmms.base.families import get_family, tiny_names
from vrh_lmms.harness.preload import GENERIC_MODEL, config_geometry, load_config, model_for_checkpoint

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny_vipllava(tiny_checkpoints, tmp_path_factory):
    from support.tiny_generic import build

    return build(tmp_path_factory.mktemp("tiny_vipllava"), tiny_checkpoints("llava"))


def _cuts_exactly_one_head(model, layer: int, head: int) -> None:
    """The output projection of `layer` inside `vrh.ablate` equals, on random inputs, the intact projection of the
    inputs with `head`'s slice zeroed; after the block it is the intact projection again."""
    import vrh_lmms as vrh

    g = model.geometry
    proj = model.lm.vrh_decoder.out_projs[layer]
    generator = torch.Generator().manual_seed(0)
    d = g.dim(layer)  # this layer's head width (Gemma 4's global layers are wider)
    x = torch.randn(2, 3, g.heads * d, generator=generator).to(proj.weight.dtype)
    masked = x.clone()
    masked[..., head * d:(head + 1) * d] = 0
    with torch.no_grad():
        intact, reference = proj(x), proj(masked)
        with vrh.ablate(model, [f"L{layer}H{head}"]):
            ablated = proj(x)
        after = proj(x)
    assert not torch.equal(intact, reference), "the head must write something for the check to mean much"
    torch.testing.assert_close(ablated, reference, rtol=1e-6, atol=1e-6)
    assert torch.equal(after, intact)


@pytest.mark.parametrize("family", tiny_names())
def test_vrh_load_takes_a_folder_of_every_family(family, tiny_checkpoints):
    import vrh_lmms as vrh
    from vrh_lmms.pipelines.demo.checkpoint import demo_model

    folder = str(tiny_checkpoints(family))
    record = get_family(family)
    model = vrh.load(folder, dtype="float32")
    assert model.name == record.wrappers[0].model_id == model_for_checkpoint(folder).model_id
    assert demo_model(folder).model_id == model.name  # the demo picks the same model (one function)
    if record.hf_class:
        assert type(model.hf).__name__ == record.hf_class
    assert model.geometry == config_geometry(load_config(folder), record)
    _cuts_exactly_one_head(model, layer=model.geometry.attention_layers[-1], head=1)


def test_vrh_load_takes_a_folder_no_family_claims_through_vrh_hf(tiny_vipllava):
    import vrh_lmms as vrh

    assert model_for_checkpoint(str(tiny_vipllava)).model_id == GENERIC_MODEL
    model = vrh.load(str(tiny_vipllava), dtype="float32")
    assert model.name == GENERIC_MODEL and type(model.hf).__name__ == "VipLlavaForConditionalGeneration"
    assert (model.geometry.layers, model.geometry.heads) == (2, 4)
    _cuts_exactly_one_head(model, layer=1, head=2)


def test_the_documented_example_runs_as_written(tiny_checkpoints, tmp_path, monkeypatch, capsys):
    """docs/api.md's block loading a tiny LLaVA folder, run in a folder holding `runs/tiny_llava`, prints what its
    comment says."""
    import re
    import shutil
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "runs/tiny_llava" in b)
    shutil.copytree(tiny_checkpoints("llava"), tmp_path / "runs" / "tiny_llava")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    exec(compile(block, "docs/api.md", "exec"), {})  # noqa: S102  (the documented block itself)
    expected = re.search(r"^# (vrh_llava .*)$", block, re.M).group(1)
    assert capsys.readouterr().out.strip() == expected
