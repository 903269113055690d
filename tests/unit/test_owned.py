"""--force never deletes what vrh-lmms did not write, and everything vrh-lmms writes follows the umask.

Each output kind is checked the way a user meets it: a foreign file planted in the output survives (with and
without --force, and the refusal does not suggest --force); our own earlier output is refused without --force
and replaced with it. Modes are checked under two umasks for every writer that goes through a temporary file
(tempfile's 0600/0700, safetensors' 0600) and for the whole folders the commands publish.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import numpy as np
import pytest
import torch

from vrh_lmms.base import atomic, owned
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import Geometry
from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file
from vrh_lmms.cli import main

REPO = Path(__file__).resolve().parents[2]


def _heads_file(path: Path, geometry: Geometry = Geometry(2, 4, 2, 16)) -> Path:
    scores = np.random.default_rng(0).random((geometry.layers, geometry.heads))
    return save_heads_file(HeadsFile({"id": "tiny", "family": "qwen2_5_vl"}, geometry, scores,
                                     ranking_from_scores(scores)), path)


# ------------------------------------------------------------------------------------------ ownership rules
LAYOUT = {"result.json": owned.json_with("schema", schema_prefix="ours/"), "plots": owned.files_matching("*.png")}


def _ours(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "result.json").write_text(json.dumps({"schema": "ours/1"}))
    (folder / "plots").mkdir(exist_ok=True)
    (folder / "plots" / "a.png").write_bytes(b"png")


def test_foreign_entries_survive_force_and_the_refusal_does_not_suggest_it(tmp_path):
    _ours(tmp_path / "out")
    (tmp_path / "out" / "notes.txt").write_text("mine")
    for force in (False, True):
        with pytest.raises(VRHError) as err:
            owned.prepare_output(tmp_path / "out", LAYOUT, force=force, what="a result")
        assert "notes.txt" in str(err.value) and "did not write" in str(err.value)
        assert "--force" not in str(err.value)
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine" and (tmp_path / "out" / "result.json").exists()


def test_an_entry_of_ours_by_name_but_not_by_content_is_foreign(tmp_path):
    out = tmp_path / "out"
    _ours(out)
    (out / "result.json").write_text(json.dumps({"schema": "theirs/1"}))  # right name, someone else's file
    (out / "plots" / "notes.txt").write_text("x")  # a foreign file inside one of our folders
    assert {p.name for p in owned.foreign_entries(out, LAYOUT)} == {"result.json", "plots"}
    with pytest.raises(VRHError, match="did not write"):
        owned.prepare_output(out, LAYOUT, force=True, what="a result")
    assert (out / "plots" / "notes.txt").exists()


def test_our_output_needs_force_and_force_removes_exactly_it(tmp_path):
    out = tmp_path / "out"
    _ours(out)
    with pytest.raises(VRHError, match="holds a result; choose another --output or pass --force"):
        owned.prepare_output(out, LAYOUT, force=False, what="a result")
    owned.prepare_output(out, LAYOUT, force=True, what="a result")
    assert out.is_dir() and not any(out.iterdir())
    owned.prepare_output(tmp_path / "new", LAYOUT, force=False, what="a result")  # absent: fine
    (tmp_path / "file").write_text("x")
    with pytest.raises(VRHError, match="is not a folder"):
        owned.prepare_output(tmp_path / "file", LAYOUT, force=True, what="a result")


def test_listing_claims_only_the_files_it_names(tmp_path):
    out = tmp_path / "ckpt"
    (out / "sub").mkdir(parents=True)
    (out / "config.json").write_text("{}")
    (out / "sub" / "w.bin").write_bytes(b"w")
    assert owned.foreign_entries(out, owned.listing_layout(out))  # no listing: nothing is ours
    owned.write_listing(out)
    assert owned.listed_files(out) == {"config.json", "sub/w.bin"}
    assert owned.foreign_entries(out, owned.listing_layout(out)) == []
    (out / "sub" / "later.txt").write_text("added by the user")
    assert [p.name for p in owned.foreign_entries(out, owned.listing_layout(out))] == ["sub"]


# ------------------------------------------------------------------------------------------ every command
def test_sweep_refuses_a_folder_with_a_foreign_file_even_with_force(tiny_qwen25, tmp_path, capsys):
    """Issue 16's first case: `sweep ... --tasks vrh_nosuch --output precious --force` used to erase precious/."""
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("do not delete")
    heads = _heads_file(tmp_path / "heads.json")
    for extra in ([], ["--force"]):
        code = main(["sweep", "--model", "vrh_qwen25", "--model_args", f"pretrained={tiny_qwen25}",
                     "--tasks", "vrh_synth_grounding", "--heads-file", str(heads), "--k", "1",
                     "--output", str(precious), *extra])
        err = capsys.readouterr().err
        assert code == 2 and "notes.txt" in err and "did not write" in err and "--force" not in err, err
    assert (precious / "notes.txt").read_text() == "do not delete" and len(list(precious.iterdir())) == 1


def test_discover_never_replaces_a_file_it_did_not_write(tiny_qwen25, tmp_path, capsys):
    notes = tmp_path / "notes.json"
    notes.write_text('{"my": "notes"}')
    for extra in ([], ["--force"]):
        code = main(["discover", "--model", "vrh_qwen25", "--model_args", f"pretrained={tiny_qwen25}",
                     "--tasks", "vrh_synth_grounding", "--output", str(notes), *extra])
        err = capsys.readouterr().err
        assert code == 2 and "not a heads file written by vrh-lmms" in err and "--force" not in err, err
    parts = tmp_path / "h.parts"
    parts.mkdir()
    (parts / "notes.txt").write_text("x")
    code = main(["discover", "--model", "vrh_qwen25", "--model_args", f"pretrained={tiny_qwen25}",
                 "--tasks", "vrh_synth_grounding", "--output", str(tmp_path / "h.json"), "--force"])
    assert code == 2 and "notes.txt" in capsys.readouterr().err
    assert notes.read_text() == '{"my": "notes"}' and (parts / "notes.txt").exists()


@pytest.mark.parametrize("command", ["steer", "patch"])
def test_steer_and_patch_refuse_a_foreign_folder_even_with_force(command, tiny_qwen25, tmp_path, capsys):
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("do not delete")
    heads = _heads_file(tmp_path / "heads.json")
    for extra in ([], ["--force"]):
        code = main([command, "--model", "vrh_qwen25", "--model_args", f"pretrained={tiny_qwen25}",
                     "--tasks", "vrh_synth_grounding", "--heads-file", str(heads), "--k", "1",
                     "--output", str(precious), *extra])
        err = capsys.readouterr().err
        assert code == 2 and "notes.txt" in err and "did not write" in err and "--force" not in err, err
    assert (precious / "notes.txt").read_text() == "do not delete" and len(list(precious.iterdir())) == 1


def _steer_folder(out: Path, identity: dict) -> None:
    from vrh_lmms.base.atomic import write_json
    from vrh_lmms.harness import lmms
    from vrh_lmms.runs.interventions.steer_run import MANIFEST

    write_json(out / MANIFEST, {"identity": identity, "configurations": []})
    lmms.write_run(out / "configs" / "top1_b4", {"results": {}, "samples": {"t": [{"doc_id": 0}]}}, {"schema": 1})
    (out / "configs" / ".top1_b8.abc").mkdir()  # write_run's staging folder of a killed run
    write_json(out / "summary.json", {"folder": str(out), "configs": [], "baseline": None, "table": []})
    atomic.write_text(out / "report.md", "# Steering\n")


def _patch_folder(out: Path, identity: dict) -> None:
    from vrh_lmms.base.atomic import write_json
    from vrh_lmms.harness import lmms
    from vrh_lmms.runs.interventions.patch_run import MANIFEST, RESULT, SCHEMA, InputStore

    write_json(out / MANIFEST, {"identity": identity})
    InputStore(out / "inputs").write("t__test__0", None, torch.zeros(3, dtype=torch.long), True)
    write_json(out / "parts" / "t__0__1.json", {"task": "t"})
    lmms.write_run(out / "eval", {"results": {}, "samples": {"t": [{"doc_id": 0}]}}, {"schema": 1})
    write_json(out / RESULT, {"schema": SCHEMA})
    atomic.write_text(out / "report.md", "# Activation patching\n")
    atomic.write_bytes(out / "patch_map.png", b"png")


@pytest.mark.parametrize("kind", ["steer", "patch"])
def test_steer_and_patch_force_removes_exactly_their_files(kind, tmp_path):
    """A different run in the folder is refused without --force; with it, exactly the command's files go (the
    layout recognises each of them), and a foreign file makes the whole folder refused."""
    from vrh_lmms.runs.interventions.patch_run import MANIFEST as PATCH_MANIFEST
    from vrh_lmms.runs.interventions.patch_run import PATCH_LAYOUT
    from vrh_lmms.runs.interventions.steer_run import MANIFEST as STEER_MANIFEST
    from vrh_lmms.runs.interventions.steer_run import STEER_LAYOUT
    from vrh_lmms.runs.runner import Manifest, claim_folder, inspect_folder

    layout, manifest = (STEER_LAYOUT, STEER_MANIFEST) if kind == "steer" else (PATCH_LAYOUT, PATCH_MANIFEST)
    out = tmp_path / kind
    (_steer_folder if kind == "steer" else _patch_folder)(out, {"model": "a"})
    assert owned.foreign_entries(out, layout) == []
    assert inspect_folder(out, layout, Manifest(out / manifest), {"model": "a"}, force=False).resume
    with pytest.raises(VRHError, match="holds a different run \\(model differ\\); choose another --output or pass "
                                       "--force"):
        inspect_folder(out, layout, Manifest(out / manifest), {"model": "b"}, force=False)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(VRHError, match="notes.txt"):
        inspect_folder(out, layout, Manifest(out / manifest), {"model": "b"}, force=True)
    (out / "notes.txt").unlink()
    (out / "configs" if kind == "steer" else out / "parts").joinpath("notes.txt").write_text("inside ours")
    assert [p.name for p in owned.foreign_entries(out, layout)] == ["configs" if kind == "steer" else "parts"]
    (out / "configs" if kind == "steer" else out / "parts").joinpath("notes.txt").unlink()
    state = inspect_folder(out, layout, Manifest(out / manifest), {"model": "b"}, force=True)
    claim_folder(state, layout)
    assert out.is_dir() and not any(out.iterdir())


def test_report_with_interventions_is_ours_and_the_sources_are_checked_first(tmp_path, capsys):
    from vrh_lmms.report.build import REPORT_LAYOUT

    out = tmp_path / "report"
    out.mkdir()
    (out / "report.json").write_text(json.dumps({"schema": "vrh-report/2", "groups": []}))
    (out / "report.md").write_text("# r\n")
    (out / "interventions.md").write_text("# Interventions\n")
    assert owned.foreign_entries(out, REPORT_LAYOUT) == []
    (out / "report.json").unlink()
    assert {p.name for p in owned.foreign_entries(out, REPORT_LAYOUT)} == {"report.md", "interventions.md"}
    code = main(["report", str(tmp_path / "nosweep"), "--output", str(tmp_path / "new"), "--steer",
                 str(tmp_path / "nosteer")])
    assert code == 2 and "--steer" in capsys.readouterr().err and not (tmp_path / "new").exists()


def test_demo_refuses_a_foreign_folder_even_with_force(tmp_path, capsys):
    out = tmp_path / "home"
    out.mkdir()
    (out / "thesis.tex").write_text("x")
    assert main(["demo", "--output", str(out), "--force"]) == 2
    err = capsys.readouterr().err
    assert "thesis.tex" in err and "--force" not in err and (out / "thesis.tex").exists()


def test_a_demo_that_finished_nothing_never_blocks_its_rerun(tmp_path):
    from vrh_lmms.pipelines.demo.pipeline import _finished_anything, demo_layout

    out = tmp_path / "demo"
    (out / "heads.parts").mkdir(parents=True)  # a demo killed during its first discovery doc
    (out / "heads.parts" / "identity.json").write_text("{}")
    (out / "data" / "synth" / "hub-0123").mkdir(parents=True)
    (out / "data" / "synth" / "hub-0123" / "test.parquet").write_bytes(b"x")
    assert owned.foreign_entries(out, demo_layout(out)) == [] and not _finished_anything(out)
    (out / "heads.parts" / "synth__test__0.npz").write_bytes(b"x")  # one finished doc: keep it without --force
    assert _finished_anything(out)


def test_report_force_replaces_our_report_but_not_a_foreign_file(tmp_path, capsys):
    out = tmp_path / "report"
    out.mkdir()
    (out / "report.json").write_text(json.dumps({"schema": "vrh-report/1", "groups": []}))
    (out / "report.md").write_text("# old report\n")
    (out / "plots").mkdir()
    (out / "plots" / "stale.png").write_bytes(b"png")
    from vrh_lmms.report.build import REPORT_LAYOUT

    assert owned.foreign_entries(out, REPORT_LAYOUT) == []
    assert owned.check_output(out, REPORT_LAYOUT, force=True, what="a report")  # all three are ours
    (out / "summary.xlsx").write_bytes(b"x")
    assert main(["report", str(tmp_path / "nosweep"), "--output", str(out), "--force"]) == 2
    err = capsys.readouterr().err
    assert "summary.xlsx" in err and "--force" not in err and (out / "plots" / "stale.png").exists()


def test_make_tiny_force_replaces_its_own_checkpoint_only(tmp_path, capsys):
    out = tmp_path / "tiny"
    assert main(["make-tiny", "qwen2_5_vl", str(out)]) == 0
    capsys.readouterr()
    assert main(["make-tiny", "qwen2_5_vl", str(out)]) == 2 and "pass --force" in capsys.readouterr().err
    assert main(["make-tiny", "qwen2_5_vl", str(out), "--seed", "1", "--force"]) == 0
    (out / "README.md").write_text("my notes on this checkpoint")
    assert main(["make-tiny", "qwen2_5_vl", str(out), "--force"]) == 2
    err = capsys.readouterr().err
    assert "README.md" in err and "--force" not in err and (out / "README.md").exists()
    real = tmp_path / "real_checkpoint"  # a checkpoint vrh-lmms did not write (no listing): never overwritten
    real.mkdir()
    (real / "config.json").write_text('{"model_type": "qwen2_5_vl"}')
    assert main(["make-tiny", "qwen2_5_vl", str(real), "--force"]) == 2
    assert (real / "config.json").read_text() == '{"model_type": "qwen2_5_vl"}'


def test_dpo_pairs_force_replaces_only_pairs(tmp_path, capsys):
    out = tmp_path / "pairs.jsonl"
    out.write_text("my own jsonl\n")
    assert main(["dpo-pairs", str(tmp_path / "sweep"), "--config", "top1", "--output", str(out), "--force"]) == 2
    err = capsys.readouterr().err
    assert "not preference pairs written by vrh-lmms" in err and "--force" not in err
    assert out.read_text() == "my own jsonl\n"


# ------------------------------------------------------------------------------------------------ umask
@pytest.fixture(params=[0o022, 0o027])
def umask(request):
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _assert_tree(root: Path, mask: int) -> None:
    assert _mode(root) == (0o777 if root.is_dir() else 0o666) & ~mask, root
    for p in root.rglob("*"):
        assert _mode(p) == (0o777 if p.is_dir() else 0o666) & ~mask, (p, oct(_mode(p)))


def test_current_umask_is_read_without_changing_it(umask):
    assert atomic.current_umask() == umask
    assert os.umask(umask) == umask


def test_atomic_writers_follow_the_umask(umask, tmp_path):
    atomic.write_text(tmp_path / "a.txt", "x")
    atomic.save_safetensors({"t": torch.zeros(2)}, tmp_path / "t.safetensors")
    staging = atomic.staging_dir(tmp_path / "folder")
    (staging / "inner.json").write_text("{}")
    atomic.publish_dir(staging, tmp_path / "folder")
    for p in (tmp_path / "a.txt", tmp_path / "t.safetensors", tmp_path / "folder"):
        _assert_tree(p, umask)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left


def test_outputs_of_every_writer_follow_the_umask(umask, tmp_path):
    """Heads file, means, discovery part, run folder (sweep configurations, discovery eval), DPO pairs, report
    text, synthetic data cache, steering and patching folders: each went through tempfile or safetensors and came out
    0600/0700 before."""
    from vrh_lmms.base.synth.cache import SynthSpec, ensure_hub_data
    from vrh_lmms.harness import lmms
    from vrh_lmms.model.ablation import save_means
    from vrh_lmms.report.build import _write_text
    from vrh_lmms.runs.discovery.store import PartStore, SamplePart
    from vrh_lmms.runs.dpo import write_pairs

    heads = _heads_file(tmp_path / "heads.json")
    means = save_means(torch.zeros(2, 4, 16), tmp_path / "heads.means.safetensors", Geometry(2, 4, 2, 16), 3)
    store = PartStore(tmp_path / "heads.parts")
    part = store.write(SamplePart("t__test__0", {"q": np.zeros((2, 4))}, np.zeros(3), {"n_box_tokens": 1}))
    run = lmms.write_run(tmp_path / "configs" / "top1", {"results": {}, "samples": {"t": [{"doc_id": 0}]}},
                         {"schema": 1})
    pairs = write_pairs([{"prompt": []}], tmp_path / "pairs.jsonl")
    _write_text(tmp_path / "report.md", "# r\n")
    synth = ensure_hub_data(SynthSpec(n=2, seed=0), root=tmp_path / "cache")
    _steer_folder(tmp_path / "steer", {"model": "a"})  # manifest, run folder, summary, report
    _patch_folder(tmp_path / "patch", {"model": "a"})  # stored inputs (torch.save), parts, patch.json, the map
    for path in (heads, means, part, run, pairs, tmp_path / "report.md", synth, tmp_path / "steer", tmp_path / "patch"):
        _assert_tree(Path(path), umask)


def test_published_checkpoints_follow_the_umask(umask, tmp_path, tiny_qwen25):
    """make-tiny and export-masked write whole checkpoint folders (save_pretrained writes safetensors 0600)."""
    assert main(["make-tiny", "qwen2_5_vl", str(tmp_path / "tiny")]) == 0
    _assert_tree(tmp_path / "tiny", umask)
    assert main(["export-masked", "--pretrained", str(tiny_qwen25), "--heads", "L0H0",
                 "--output", str(tmp_path / "masked")]) == 0
    _assert_tree(tmp_path / "masked", umask)


def test_no_module_writes_through_tempfile_or_safetensors_directly():
    """The umask fix lives in vrh_lmms/base/atomic.py; a new writer that bypasses it would bring 0600 files back."""
    pattern = re.compile(r"\b(mkstemp|mkdtemp|NamedTemporaryFile)\(|safetensors\.torch import save_file")
    offenders = []
    for folder in ("vrh_lmms", "model_wrappers", "tasks"):
        for path in (REPO / folder).rglob("*.py"):
            if path.name == "atomic.py" and path.parent.name == "base":
                continue
            if pattern.search(path.read_text()):
                offenders.append(str(path.relative_to(REPO)))
    assert offenders == []


def test_synth_never_overwrites_a_dataset_it_did_not_write(tmp_path, capsys):
    out = tmp_path / "data"
    assert main(["synth", str(out), "--split", "test=2"]) == 0
    capsys.readouterr()
    assert main(["synth", str(out), "--split", "test=2"]) == 2 and "pass --force" in capsys.readouterr().err
    assert main(["synth", str(out), "--split", "test=3", "--force"]) == 0
    real = tmp_path / "refcoco"  # a real dataset's split of the same name
    real.mkdir()
    (real / "test.parquet").write_bytes(b"PAR1 not ours")
    for extra in ([], ["--force"]):
        assert main(["synth", str(real), "--split", "test=2", *extra]) == 2
        err = capsys.readouterr().err
        assert "not synthetic data written by vrh-lmms" in err and "--force" not in err
    assert (real / "test.parquet").read_bytes() == b"PAR1 not ours"
