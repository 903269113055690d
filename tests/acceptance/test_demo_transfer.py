"""`vrh-lmms demo --transfer`: a second VLM's discovery and sweep, each model's top-k in the other, and the report's
transfer table. With a twin of the shipped model (same weights, another folder name) every transferred drop must
equal the model's own drop, which checks the plumbing end to end; a second model of other scenes, another geometry
or the same folder name is refused before anything loads."""

from __future__ import annotations

import json
import shutil

import pytest

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.synth.demo_spec import SPEC_FILE, DemoSpec
from vrh_lmms.pipelines.demo.pipeline import DemoSettings, demo_layout, demo_model_path, run_demo


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    folder = tmp_path_factory.mktemp("second") / "demo_twin"
    shutil.copytree(demo_model_path(), folder)
    return folder


def test_transfer_with_a_twin_equals_the_models_own_heads(twin, tmp_path):
    settings = DemoSettings(n_discovery=4, n_eval=12, ks=(5,), random_seeds=1, transfer_model=str(twin),
                            recall=False)
    out = tmp_path / "demo"
    summary = run_demo(out, settings, progress=False)
    rows = summary["transfer"]
    assert sorted(r["model"].split("/")[-1] for r in rows) == ["demo_model", "demo_twin"]
    for row in rows:
        assert row["k"] == 5 and row["transferred_drop"] == pytest.approx(row["own_drop"])
        assert row["heads_from"].split("/")[-1] != row["model"].split("/")[-1]
    report = (out / "report" / "report.md").read_text()
    assert "## Cross-model transfer of heads" in report and "top5@demo_twin" in report
    assert "Transfer between the two VLMs" in (out / "demo_summary.md").read_text()
    # compare-heads on the two heads files: a twin's top-5 is the model's own, its score map the same
    agreement = summary["transfer_heads"]
    assert [(r["k"], r["overlap"]) for r in agreement] == [(5, 5)]
    assert agreement[0]["spearman"] == pytest.approx(1.0) and agreement[0]["spearman_live"] == pytest.approx(1.0)
    assert "top-5: 5 shared (chance 0.26" in (out / "demo_summary.md").read_text()
    transfer_sweeps = sorted(p.name for p in (out / "transfer").glob("sweep*"))
    assert transfer_sweeps == ["sweep", "sweep_first_with_second_heads", "sweep_second_with_first_heads"]
    assert not (out / "transfer" / "sweep_second_with_first_heads" / "configs" / "baseline").exists()
    from vrh_lmms.base import owned

    assert owned.foreign_entries(out, demo_layout(out)) == []
    assert json.loads((out / "demo_summary.json").read_text())["transfer"] == rows


def test_a_second_model_that_cannot_be_compared_is_refused(twin, tmp_path, monkeypatch):
    other_scenes = tmp_path / "other_scenes"
    shutil.copytree(twin, other_scenes)
    bigger = {**json.loads((other_scenes / SPEC_FILE).read_text()), "image_size": DemoSpec.load(twin).image_size + 28}
    (other_scenes / SPEC_FILE).write_text(json.dumps(bigger))
    with pytest.raises(VRHError, match="trained on other scenes"):
        run_demo(tmp_path / "a", DemoSettings(transfer_model=str(other_scenes)), progress=False)
    same_name = tmp_path / "x" / "demo_model"
    shutil.copytree(twin, same_name)
    with pytest.raises(VRHError, match="same one; rename"):
        run_demo(tmp_path / "b", DemoSettings(transfer_model=str(same_name)), progress=False)
    with pytest.raises(VRHError, match="--transfer"):
        run_demo(tmp_path / "c", DemoSettings(transfer_model=str(tmp_path / "missing")), progress=False)
    from vrh_lmms.pipelines.demo import transfer

    monkeypatch.setattr(transfer, "SECOND_MODEL", "no_such_model")  # the bare flag where no second model is shipped
    with pytest.raises(VRHError, match="this version ships none"):
        run_demo(tmp_path / "d", DemoSettings(transfer_model="shipped"), progress=False)
    assert not any((tmp_path / name).exists() for name in ("a", "b", "c", "d"))
