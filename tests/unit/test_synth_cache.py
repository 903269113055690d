"""Synthetic data for the offline tasks: spec validation, cached generation, and `vrh-lmms synth`."""

from __future__ import annotations

import pickle

import pytest

from vrh_lmms.base.synth.cache import SynthSpec, ensure_hub_data, ensure_refer_data
from vrh_lmms.base.synth.scenes import generate_scenes
from vrh_lmms.cli import main


def test_spec_digest_tracks_content():
    assert SynthSpec().digest() == SynthSpec().digest()
    assert SynthSpec(n=5).digest() != SynthSpec(n=6).digest()
    assert SynthSpec(scene={"image_size": 160}).digest() != SynthSpec().digest()
    assert SynthSpec(scene={"shapes": ["circle", "ring"]}).scene_config().shapes == ("circle", "ring")


@pytest.mark.parametrize("data,match", [({"n": 0}, "positive"), ({"scene": {"size": 3}}, "unknown scene setting"),
                                        ({"count": 3}, "unknown key")])
def test_bad_specs(data, match):
    with pytest.raises(ValueError, match=match):
        SynthSpec.from_dict(data)


def test_hub_data_is_generated_once(tmp_path):
    import datasets

    spec = SynthSpec(n=3, seed=5, start=10)
    folder = ensure_hub_data(spec, tmp_path)
    stamp = (folder / "test.parquet").stat().st_mtime_ns
    assert ensure_hub_data(spec, tmp_path) == folder and (folder / "test.parquet").stat().st_mtime_ns == stamp
    rows = datasets.load_dataset("parquet", data_files={"test": str(folder / "test.parquet")}, split="test")
    assert rows["answer"] == [[s.expression] for s in generate_scenes(3, seed=5, start=10)]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folders left behind


def test_refer_data(tmp_path):
    root = ensure_refer_data(SynthSpec(n=2), tmp_path)
    refs = pickle.loads((root / "refcoco" / "refs(unc).p").read_bytes())
    assert [r["split"] for r in refs] == ["test", "test"] and (root / "refcoco" / "instances.json").is_file()


def test_synth_command_hub_and_refer(tmp_path, capsys):
    assert main(["synth", str(tmp_path / "hub"), "--split", "train=3", "--split", "test=2", "--seed", "4"]) == 0
    assert (tmp_path / "hub" / "train.parquet").is_file() and (tmp_path / "hub" / "test.parquet").is_file()
    assert main(["synth", str(tmp_path / "refer"), "--layout", "refer", "--split", "val=2",
                 "--scene", '{"image_size": 128}', "--dataset", "refcocog", "--split-by", "umd"]) == 0
    refs = pickle.loads((tmp_path / "refer" / "refcocog" / "refs(umd).p").read_bytes())
    assert len(refs) == 2 and (tmp_path / "refer" / "images").is_dir()


@pytest.mark.parametrize("args,match", [(["--split", "test"], "NAME=COUNT"), (["--split", "a=1", "--split", "a=2"],
                                                                           "twice"),
                                        (["--scene", '{"bogus": 1}'], "bogus")])
def test_synth_command_errors(tmp_path, capsys, args, match):
    assert main(["synth", str(tmp_path / "x"), *args]) == 2
    assert match in capsys.readouterr().err
