"""A family whose code needs a newer transformers than the installed one is refused in one line when used, and
blocks no other family (the oldest supported set, transformers 5.0, lacks Molmo 2, Llama 4's processor, ...)."""

from __future__ import annotations

import importlib

import pytest

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.families import resolve_ref
from vrh_lmms.model.capture import tilings


def _missing_in_transformers(name: str, *args, **kwargs):
    raise ImportError("cannot import name 'Molmo9Config' from 'transformers' (/x/transformers/__init__.py)")


def test_a_name_missing_from_transformers_is_one_line_naming_the_module_and_version(monkeypatch):
    monkeypatch.setattr(importlib, "import_module", _missing_in_transformers)
    with pytest.raises(VRHError) as err:
        resolve_ref("vrh_lmms.model.tiny.molmo9:build")
    msg = str(err.value)
    assert "\n" not in msg
    assert "vrh_lmms.model.tiny.molmo9 needs a newer transformers than the installed" in msg
    assert "Molmo9Config" in msg


def test_other_import_errors_pass_through(monkeypatch):
    def missing(name, *a, **k):
        raise ImportError("No module named 'somewhere_else'")

    monkeypatch.setattr(importlib, "import_module", missing)
    with pytest.raises(ImportError, match="somewhere_else"):
        resolve_ref("pkg.mod:attr")


def test_one_layout_builder_this_transformers_lacks_leaves_the_others_working(monkeypatch):
    real = tilings.resolve_ref

    def lacking_llama4(ref):
        if "llama4" in str(ref):
            raise VRHError("vrh_lmms.model.capture.tilings_crops needs a newer transformers than the installed 5.0.0")
        return real(ref)

    monkeypatch.setattr(tilings, "resolve_ref", lacking_llama4)
    builders = dict(tilings.BUILDERS)
    assert builders["llama4"].__name__ == "llama4_tiles"
    with pytest.raises(VRHError, match="needs a newer transformers"):
        builders["llama4"](336, 336, {})
    assert builders["llava_next"].__name__ == "llava_next_anyres"
    assert builders["qwen2_5_vl"] is tilings.merged_patch_grid


def test_gemma4_without_its_transformers_modules_is_refused_in_one_line(monkeypatch):
    """transformers 5.0 has no Gemma 4: its layout (Gemma 4's own module, which imports Gemma 4 names at its top) is
    refused in one line when used, and no other family's layout is touched."""
    import sys

    for name in ("transformers.models.gemma4", "transformers.models.gemma4.image_processing_gemma4"):
        monkeypatch.setitem(sys.modules, name, None)  # importing it now raises ImportError, as on transformers 5.0
    monkeypatch.delitem(sys.modules, "vrh_lmms.model.capture.tilings_gemma4", raising=False)
    builders = dict(tilings.BUILDERS)
    with pytest.raises(VRHError) as err:
        builders["gemma4"](640, 480, {})
    assert "\n" not in str(err.value)
    assert "vrh_lmms.model.capture.tilings_gemma4 needs a newer transformers than the installed" in str(err.value)
    assert builders["gemma3"].__name__ == "gemma3_crops" and builders["llama4"].__name__ == "llama4_tiles"


def test_llava_onevision1_5_without_its_transformers_class_is_refused_in_one_line(monkeypatch, tmp_path):
    """transformers 5.0 may lack LLaVA-OneVision-1.5: its tiny factory (the family's own module, which imports the
    class at its top) and its wrapper are refused in one line, before any folder is written or any load."""
    import sys

    from vrh_lmms.model.tiny.registry import build_tiny
    from vrh_lmms.model_wrappers.llava_onevision1_5 import image_text_class

    monkeypatch.setitem(sys.modules, "transformers.models.llava_onevision1_5", None)  # as on 5.0: no such module
    monkeypatch.delitem(sys.modules, "vrh_lmms.model.tiny.llava_onevision1_5", raising=False)
    with pytest.raises(VRHError) as err:
        build_tiny("llava_onevision1_5", tmp_path / "tiny")
    assert "\n" not in str(err.value) and not (tmp_path / "tiny").exists()
    assert "vrh_lmms.model.tiny.llava_onevision1_5 needs a newer transformers than the installed" in str(err.value)
    with pytest.raises(VRHError, match=r"needs a transformers with LlavaOnevision15ForConditionalGeneration"):
        with image_text_class(str(tmp_path / "anything")):
            pass
