"""An output that cannot be written (a read-only folder, a full disk) is one line naming the path and exit code 2,
not a traceback: the command line's guard (vrh_lmms.cli._guarded) on a real command, `compare-heads`, whose writes go
through vrh_lmms.base.atomic. The failures are simulated where the system raises them (mkstemp, a file's write), since
a test cannot count on mounting a full or read-only filesystem (run by hand on a 64 KiB tmpfs, full, and remounted
read-only: the same lines)."""

from __future__ import annotations

import errno
import pathlib
import tempfile

import numpy as np
import pytest

from vrh_lmms.base.heads import Geometry
from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file
from vrh_lmms.cli import main


@pytest.fixture
def heads_pair(tmp_path):
    paths = []
    for seed in (0, 1):
        scores = np.random.default_rng(seed).random((2, 3))
        hf = HeadsFile({"id": f"m{seed}"}, Geometry(2, 3, 1, 4), scores, ranking_from_scores(scores))
        paths.append(str(save_heads_file(hf, tmp_path / f"h{seed}.json")))
    return paths


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def test_a_full_disk_is_one_line_naming_the_file(heads_pair, tmp_path, monkeypatch, capsys):
    real = pathlib.Path.write_text

    def full(self, *args, **kwargs):
        if self.name.startswith(".compare.json."):
            raise OSError(errno.ENOSPC, "No space left on device")  # what write(2) raises: no file named
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "write_text", full)
    out = tmp_path / "cmp"
    assert main(["compare-heads", *heads_pair, "--k", "2", "--output", str(out)]) == 2
    err = _one_line(capsys)
    assert err == f"vrh-lmms: error: cannot write {out / 'compare.json'}: No space left on device"
    assert not [p for p in out.iterdir() if p.name.startswith(".compare.json.")]  # no temporary left behind


def test_a_write_that_names_no_file_names_the_output(heads_pair, tmp_path, monkeypatch, capsys):
    """matplotlib's savefig (PIL closing the file) on a full disk raises without a file name: the output is named."""
    from matplotlib.figure import Figure

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full)
    out = tmp_path / "cmp"
    assert main(["compare-heads", *heads_pair, "--k", "2", "--output", str(out)]) == 2
    assert _one_line(capsys) == f"vrh-lmms: error: cannot write into {out}: No space left on device"


def test_a_read_only_folder_is_one_line_naming_it(heads_pair, tmp_path, monkeypatch, capsys):
    def read_only(*args, dir=None, **kwargs):
        raise PermissionError(errno.EROFS, "Read-only file system", str(dir))

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    out = tmp_path / "cmp"
    assert main(["compare-heads", *heads_pair, "--k", "2", "--output", str(out)]) == 2
    assert _one_line(capsys) == f"vrh-lmms: error: cannot write {out}: Read-only file system"


def test_other_os_errors_keep_their_traceback(heads_pair, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(tempfile, "mkstemp", broken)
    with pytest.raises(OSError, match="Input/output error"):
        main(["compare-heads", *heads_pair, "--k", "2", "--output", str(tmp_path / "cmp")])


def test_an_empty_dataset_is_one_line(capsys):
    """A task whose source yields no docs raises SourceError, which the command line shows as one line."""
    from vrh_lmms.cli import _guarded
    from vrh_lmms.tasks.common.docs import from_records

    assert _guarded(lambda: from_records([])) == 2
    assert _one_line(capsys) == "vrh-lmms: error: no docs to evaluate"
