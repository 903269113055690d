"""`vrh-lmms demo --pretrained DIR` names the checkpoint folder; the earlier `--model DIR` keeps working with a note
(`--model` names a vrh_* model in every other command)."""

from __future__ import annotations

import argparse

import pytest

from vrh_lmms.cli.commands import demo
from vrh_lmms.pipelines.demo import pipeline


@pytest.fixture
def ran(monkeypatch):
    seen = {}

    def fake_run_demo(output, settings, force=False, model_path=None):
        seen["model_path"] = model_path
        return {}

    monkeypatch.setattr(pipeline, "run_demo", fake_run_demo)  # demo.run imports it when it runs
    parser = argparse.ArgumentParser()
    demo.configure(parser)
    return lambda argv: (demo.run(parser.parse_args(argv)), seen["model_path"])[1]


def test_pretrained_names_the_checkpoint(ran, capsys):
    assert ran(["--pretrained", "ckpt/a"]) == "ckpt/a"
    assert ran([]) is None
    assert capsys.readouterr().err == ""


def test_the_old_flag_still_works_with_one_line(ran, capsys):
    assert ran(["--model", "ckpt/b"]) == "ckpt/b"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--model DIR is now --pretrained DIR" in err[0]


def test_help_shows_the_new_flag_only():
    parser = argparse.ArgumentParser()
    demo.configure(parser)
    text = parser.format_help()
    assert "--pretrained DIR" in text and "--model" not in text
