"""Heads files with bad numbers are refused in one line naming the file and the field: NaN, null and infinite scores,
strings where numbers belong, rankings that contradict the scores, binary files. Files that discovery wrote keep
loading, the NaN-as-0-ranked-last tail included; `compare-heads` on an all-NaN file stops before its folder."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import Geometry
from vrh_lmms.base.heads.heads_file import HeadsFile, load_heads_file, ranking_from_scores, save_heads_file

G = Geometry(layers=2, heads=3, kv_heads=1, head_dim=4)


def good_json(tmp_path) -> dict:
    scores = np.arange(6, dtype=float).reshape(2, 3) / 10
    hf = HeadsFile(model={"id": "tiny"}, geometry=G, scores=scores, ranking=ranking_from_scores(scores),
                   cells={"in,sum,mean": {"scores": scores[::-1].tolist(),
                                          "ranking": [str(h) for h in ranking_from_scores(scores[::-1])]}})
    save_heads_file(hf, tmp_path / "good.json", force=True)
    return json.loads((tmp_path / "good.json").read_text())


def refused(tmp_path, data, match: str, raw: bytes | None = None) -> str:
    path = tmp_path / "bad.json"
    path.write_bytes(raw if raw is not None else json.dumps(data).encode())
    with pytest.raises(VRHError, match=match) as info:
        load_heads_file(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return message


def test_a_file_discovery_wrote_loads(tmp_path):
    data = good_json(tmp_path)
    hf = load_heads_file(tmp_path / "good.json")
    assert hf.scores.tolist() == data["scores"]
    assert hf.cell_ranking("in,sum,mean")[0] == ranking_from_scores(np.asarray(data["scores"])[::-1])[0]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), None, "0.3", True])
def test_a_bad_score_is_named(tmp_path, value):
    data = good_json(tmp_path)
    data["scores"][1][2] = value
    # json.dumps writes NaN / Infinity, which json.loads reads back as floats, as a file written by numpy would have
    refused(tmp_path, data, r"field 'scores' of L1H2 is .*finite number")


def test_all_nan_scores_are_refused(tmp_path):
    data = good_json(tmp_path)
    data["scores"] = [[float("nan")] * 3] * 2
    refused(tmp_path, data, r"'scores' of L0H0 is nan")


@pytest.mark.parametrize("value", ["abc", {"a": 1}, 3, [1, 2], [[1, 2, 3]], None])
def test_scores_of_the_wrong_type_or_shape(tmp_path, value):
    data = good_json(tmp_path)
    data["scores"] = value
    refused(tmp_path, data, r"field 'scores' (must be a list|has shape)")


def test_a_ranking_that_contradicts_the_scores(tmp_path):
    data = good_json(tmp_path)
    data["ranking"][0], data["ranking"][1] = data["ranking"][1], data["ranking"][0]
    message = refused(tmp_path, data, r"field 'ranking': item 1 \(L1H2, score 0.5\) is ranked below item 0")
    assert "decreasing score" in message


def test_a_cell_ranking_that_contradicts_its_scores(tmp_path):
    data = good_json(tmp_path)
    data["cells"]["in,sum,mean"]["ranking"].reverse()
    refused(tmp_path, data, r"field 'cells.in,sum,mean.ranking'")
    data = good_json(tmp_path)
    data["cells"]["in,sum,mean"]["scores"][0][0] = None
    refused(tmp_path, data, r"field 'cells.in,sum,mean.scores' of L0H0 is None")
    data["cells"] = ["x"]
    refused(tmp_path, data, r"field 'cells' must be an object")


def test_ranking_items_must_be_head_names(tmp_path):
    data = good_json(tmp_path)
    data["ranking"][2] = 5
    refused(tmp_path, data, r"field 'ranking' item 2 is 5")
    data["ranking"] = "L0H0"
    refused(tmp_path, data, r"field 'ranking' must be a list")


def test_ties_and_the_legacy_zero_tail_are_accepted(tmp_path):
    """Discovery wrote a NaN score as 0 and ranked the head last, after negative (null-query corrected) scores;
    equal scores may come in either order (rounding to 8 decimals can tie heads that were ranked apart)."""
    data = good_json(tmp_path)
    data["scores"] = [[0.5, 0.5, -0.1], [0.0, -0.2, 0.0]]
    data["ranking"] = ["L0H1", "L0H0", "L0H2", "L1H1", "L1H0", "L1H2"]
    path = tmp_path / "legacy.json"
    path.write_text(json.dumps(data))
    assert [str(h) for h in load_heads_file(path).ranking] == data["ranking"]
    data["ranking"] = ["L0H1", "L0H0", "L1H0", "L0H2", "L1H1", "L1H2"]  # a 0 ahead of -0.1 is fine too
    path.write_text(json.dumps(data))
    load_heads_file(path)
    data["ranking"] = ["L0H1", "L0H0", "L0H2", "L1H0", "L1H1", "L1H2"]  # -0.2 after a 0 that is not the tail: no
    refused(tmp_path, data, r"item 4 \(L1H1, score -0.2\)|item 3 \(L1H0, score 0\) is ranked below item 2")


def test_binary_and_non_json_files(tmp_path):
    refused(tmp_path, None, r"not valid JSON: it is not UTF-8 text", raw=b"\x80\x81\xff\x00\x01" * 20)
    refused(tmp_path, None, r"not valid JSON", raw=b"scores: [1, 2]")
    refused(tmp_path, None, r"field 'geometry' must be an object",
            raw=json.dumps({"schema": "vrh-heads/1", "model": {}, "geometry": None, "scores": [],
                            "ranking": []}).encode())


def test_image_mass_is_checked_like_scores(tmp_path):
    data = good_json(tmp_path)
    data["image_mass"] = {"query": "out", "scores": [[0.1, 0.2, "x"], [0.1, 0.2, 0.3]]}
    path = tmp_path / "mass.json"
    path.write_text(json.dumps(data))
    with pytest.raises(VRHError, match=r"field 'image_mass.scores' of L0H2 is 'x'"):
        load_heads_file(path).image_mass()


def test_compare_heads_refuses_an_all_nan_file_before_its_folder(tmp_path, capsys):
    from vrh_lmms.cli import main

    data = good_json(tmp_path)
    data["scores"] = [[float("nan")] * 3] * 2
    (tmp_path / "nan.json").write_text(json.dumps(data))
    out = tmp_path / "cmp"
    assert main(["compare-heads", str(tmp_path / "good.json"), str(tmp_path / "nan.json"), "--k", "2",
                 "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "nan.json" in err and "field 'scores' of L0H0 is nan" in err
    assert not out.exists()
