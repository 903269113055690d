"""`vrh-lmms compare-heads` and `vrh-lmms score-distribution` end to end on heads files that a real discovery wrote
(a tiny Qwen2.5-VL through lmms-eval): every number in compare.json recomputed here with scipy from the two files'
JSON, `--cell` read from the files' cells block, the published lists through the command line, refusal across
geometries in one line, and no earlier output replaced without --force."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats as sps

from vrh_lmms.base.heads.geometry import Geometry
from vrh_lmms.base.heads.heads_file import HeadsFile, load_heads_file, ranking_from_scores, save_heads_file

PIXELS = 224 * 224
K = 3
OTHER_CELL = "out,argmax,mean"


@pytest.fixture(scope="module")
def discovered(tiny_qwen25, tmp_path_factory):
    """A heads file from `vrh-lmms discover` (primary out,sum,mean) and the same discovery re-ranked by another of its
    cells, saved as a second heads file (what `discover --scoring out,argmax,mean` writes as its primary)."""
    from vrh_lmms.cli import main

    tmp = tmp_path_factory.mktemp("compare")
    mp = pytest.MonkeyPatch()
    mp.setenv("VRH_CACHE_DIR", str(tmp / "cache"))
    mp.setenv("VRH_HEADS_REGISTRY", str(tmp / "registry.json"))
    mp.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 3, "seed": 4}))
    a = tmp / "a" / "heads.json"
    args = f"pretrained={tiny_qwen25},dtype=float32,min_pixels={PIXELS},max_pixels={PIXELS}"
    try:
        assert main(["discover", "--model", "vrh_qwen25", "--model_args", args, "--tasks", "vrh_synth_grounding",
                     "--limit", "3", "--gen-kwargs", "max_new_tokens=6", "--output", str(a)]) == 0
    finally:
        mp.undo()
    hf = load_heads_file(a)
    scores = np.asarray(hf.cells[OTHER_CELL]["scores"], dtype=float)
    b = save_heads_file(HeadsFile(hf.model, hf.geometry, scores, ranking_from_scores(scores),
                                  scoring={**hf.scoring, "cell": OTHER_CELL}, cells=hf.cells, baseline=hf.baseline,
                                  extra=hf.extra), tmp / "b.json")
    return a, b


def _pair(out):
    return json.loads((out / "compare.json").read_text())["pairs"][0]


def test_compare_heads_numbers_are_scipy_on_the_files(discovered, tmp_path, capsys):
    from vrh_lmms.cli import main

    a, b = discovered
    out = tmp_path / "cmp"
    assert main(["compare-heads", str(a), str(b), "--k", str(K), "--output", str(out)]) == 0
    ja, jb = json.loads(a.read_text()), json.loads(b.read_text())
    sa, sb = np.asarray(ja["scores"]), np.asarray(jb["scores"])
    n = sa.size
    top_a, top_b = set(ja["ranking"][:K]), set(jb["ranking"][:K])
    shared = len(top_a & top_b)
    pair = _pair(out)
    assert pair["overlap"] == shared and pair["population"] == n
    assert pair["chance"] == pytest.approx(K * K / n)
    assert pair["p_value"] == pytest.approx(float(sps.hypergeom.sf(shared - 1, n, K, K)), rel=1e-9, abs=0)
    assert pair["jaccard"] == pytest.approx(shared / len(top_a | top_b))
    assert pair["spearman"] == pytest.approx(sps.spearmanr(sa.ravel(), sb.ravel()).statistic, rel=1e-9)
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "compare.md").read_text()
    assert f"share {shared} of their top-{K} heads" in md and "compare.png" in md
    assert str(out / "compare.md") in capsys.readouterr().out
    # an earlier comparison is kept unless --force
    assert main(["compare-heads", str(a), str(b), "--k", str(K), "--output", str(out)]) == 2
    assert "pass --force" in capsys.readouterr().err
    # --cell: both files scored by the same cell of the same discovery agree exactly
    assert main(["compare-heads", str(a), str(b), "--k", str(K), "--cell", "out,sum,mean", "--output", str(out),
                 "--force"]) == 0
    pair = _pair(out)
    assert pair["overlap"] == K and pair["spearman"] == pytest.approx(1.0)
    assert main(["compare-heads", str(a), str(b), "--cell", "nope", "--output", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert f"{a}: heads file has no scoring cell or preset 'nope'" in err
    assert err.count("localization_heads") == 1  # a preset named like its cell is listed once


def test_geometries_refused_and_published_lists_on_the_command_line(discovered, tmp_path, capsys):
    from vrh_lmms.cli import main

    a, _ = discovered
    g = load_heads_file(a).geometry
    scores = np.arange(float((g.layers + 1) * g.heads)).reshape(g.layers + 1, g.heads)
    other = save_heads_file(HeadsFile({"id": "other"}, Geometry(g.layers + 1, g.heads, g.kv_heads, g.head_dim), scores,
                                      ranking_from_scores(scores)), tmp_path / "other.json")
    assert main(["compare-heads", str(a), str(other), "--k", "2", "--output", str(tmp_path / "no")]) == 2
    err = capsys.readouterr().err.strip()
    assert "differ in geometry" in err and "--allow-cross-geometry" in err and "\n" not in err
    assert not (tmp_path / "no").exists()
    assert main(["compare-heads", str(a), str(other), "--k", "2", "--allow-cross-geometry",
                 "--output", str(tmp_path / "cross")]) == 0
    assert _pair(tmp_path / "cross")["spearman"] is None
    out = tmp_path / "paper"
    assert main(["compare-heads", "paper:Qwen2.5-VL-7B:refcoco", "paper:InternVL3-8B:refcoco", "paper:Qwen2.5-VL-7B:"
                 "refcocog", "--output", str(out)]) == 0
    block = json.loads((out / "compare.json").read_text())
    assert block["pairs"][0]["overlap"] == 15  # the paper's Fig 7 figure for this same-backbone pair
    assert len(block["overlap_matrix"]) == 3 and all(p["spearman"] is None for p in block["pairs"])
    # a folder holding a file vrh-lmms did not write is refused, --force or not, and left as it was
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "compare.md").write_text("my notes")
    for extra in ([], ["--force"]):
        assert main(["compare-heads", "paper:Qwen2.5-VL-7B", "paper:InternVL3-8B", "--output", str(mine), *extra]) == 2
        assert "did not write" in capsys.readouterr().err
    assert [p.name for p in mine.iterdir()] == ["compare.md"] and (mine / "compare.md").read_text() == "my notes"


def test_score_distribution_shares_are_the_files_shares(discovered, tmp_path, capsys):
    from vrh_lmms.cli import main

    a, b = discovered
    out = tmp_path / "dist"
    assert main(["score-distribution", str(a), str(b), "--thresholds", "1e-3,5e-3,0.05", "--output", str(out)]) == 0
    block = json.loads((out / "distribution.json").read_text())
    for path, row in zip((a, b), block["inputs"], strict=True):
        scores = np.asarray(json.loads(path.read_text())["scores"], dtype=float)
        for t in (1e-3, 5e-3, 0.05):
            assert row["above"][f"{t:g}"] == pytest.approx(np.mean(scores > t))
    assert (out / "distribution.png").read_bytes()[:4] == b"\x89PNG"
    assert "no paper value is shown" in (out / "distribution.md").read_text()
    assert main(["score-distribution", "paper:Qwen2.5-VL-7B", "--output", str(tmp_path / "p")]) == 2
    assert "carries no scores" in capsys.readouterr().err
