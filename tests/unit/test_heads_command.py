"""`vrh-lmms heads FILE --cell X`: the title names the cell whose ranking it prints."""

from __future__ import annotations

import numpy as np

from vrh_lmms import cli
from vrh_lmms.base.heads.geometry import Geometry
from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file


def _heads_file(tmp_path):
    rng = np.random.default_rng(0)
    primary, other = rng.random((2, 4)), rng.random((2, 4))
    cells = {name: {"scores": s.tolist(), "ranking": [str(h) for h in ranking_from_scores(s)]}
             for name, s in (("out,sum,mean", primary), ("in,sum,mean", other))}
    hf = HeadsFile({"id": "tiny", "family": "qwen2_5_vl"}, Geometry(2, 4, 4, 8), primary, ranking_from_scores(primary),
                   scoring={"query": "out", "key": "sum", "aggregate": "mean", "task": "t", "n_samples": 3},
                   cells=cells, extra={"presets": {"qrhead": "in,sum,mean"}})
    return save_heads_file(hf, tmp_path / "heads.json"), other


def _title_and_rows(capsys, argv):
    assert cli.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    return lines[0], [line.split()[1] for line in lines[1:]]


def test_title_names_the_cell_shown(tmp_path, capsys):
    path, other = _heads_file(tmp_path)
    title, rows = _title_and_rows(capsys, ["heads", str(path), "--top", "3"])
    assert "scoring out,sum,mean on t" in title
    title, rows = _title_and_rows(capsys, ["heads", str(path), "--top", "3", "--cell", "in,sum,mean"])
    assert "scoring in,sum,mean on t" in title and "out,sum,mean" not in title
    assert rows == [str(h) for h in ranking_from_scores(other)[:3]]
    title, rows = _title_and_rows(capsys, ["heads", str(path), "--top", "3", "--cell", "qrhead"])
    assert "scoring qrhead (cell in,sum,mean) on t" in title
