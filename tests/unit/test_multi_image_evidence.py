"""Evidence kinds `image` / `image_box` read from a doc (one clear error for a malformed one), and the
`vrh_synth_haystack` docs: exactly one image holds the referred object, and the doc says where."""

from __future__ import annotations

import json

import pytest

from vrh_lmms.base.data_env import DATA_VARIABLES
from vrh_lmms.base.errors import VRHError
from vrh_lmms.runs.discovery.evidence import evidence_kind, get_kind, known_kinds
from vrh_lmms.tasks.common import haystack
from vrh_lmms.tasks.common.sources import SourceError

SIZES = [[224, 224], [112, 160]]


def doc(**evidence) -> dict:
    return {"vrh_evidence": evidence, "vrh_image_sizes": SIZES, "expression": "the red circle", "image_id": "d0"}


def test_kinds_are_registered_without_a_grid():
    assert {"image", "image_box"} <= set(known_kinds())
    assert evidence_kind(doc(kind="image", index=1)) == "image"
    assert not get_kind("image").grid and not get_kind("image_box").grid


def test_targets_read_index_box_and_sizes():
    t = get_kind("image_box").target(doc(kind="image_box", index=1, box=[10, 20, 50, 60]), "d")
    assert (t.index, t.box, t.sizes, t.image_size) == (1, (10.0, 20.0, 50.0, 60.0), ((224, 224), (112, 160)), None)
    assert t.expression == "the red circle"
    t = get_kind("image").target({"vrh_evidence": {"kind": "image", "index": 3, "query": "q"}}, "d")
    assert (t.index, t.sizes, t.box, t.expression) == (3, None, None, "q")  # sizes optional for a whole image


@pytest.mark.parametrize("bad, message", [
    (doc(kind="image", index=2), r"^t doc 0: vrh_evidence index 2 is out of range for 2 images \(vrh_image_sizes\)$"),
    (doc(kind="image_box", index=5, box=[0, 0, 1, 1]), r"index 5 is out of range for 2 images"),
    ({"vrh_evidence": {"kind": "image_box", "index": 0, "box": [0, 0, 1, 1]}},
     r"^t doc 0: image_box evidence needs vrh_image_sizes \[\[w, h\], \.\.\.\], one per image$"),
    (doc(kind="image", index=-1), r"needs `index`, a 0-based image number, got -1"),
    (doc(kind="image", index="0"), r"needs `index`, a 0-based image number, got '0'"),
    (doc(kind="image_box", index=1, box=[10, 20, 5, 60]), r"box must be \[x1, y1, x2, y2\] inside image 1 \(112x160\)"),
    (doc(kind="image_box", index=1, box=[120, 0, 130, 10]), r"inside image 1 \(112x160\)"),
    (doc(kind="image_box", index=1), r"inside image 1 \(112x160\), got None"),
    ({**doc(kind="image", index=0), "vrh_image_sizes": [[224]]}, r"vrh_image_sizes must be \[\[w, h\], \.\.\.\]"),
    ({**doc(kind="image", index=0), "vrh_image_sizes": [[0, 5]]}, r"must list positive \[w, h\] per image"),
])
def test_malformed_docs_are_one_clear_error(bad, message):
    kind = get_kind(evidence_kind(bad))
    with pytest.raises(VRHError, match=message):
        kind.target(bad, "t doc 0")


CFG = {**haystack.DEFAULTS, "n": 6, "seed": 3, "n_images": 4, "sizes": [112, 168]}


@pytest.mark.parametrize("mode", haystack.MODES)
def test_haystack_docs_hold_the_object_in_exactly_one_image(mode):
    from vrh_lmms.base.synth.scenes import generate_scene

    for i in range(CFG["n"]):
        d = haystack.make_doc(i, {**CFG, "mode": mode})
        k = d["vrh_needle_index"]
        colour, shape = d["expression"].split()[1:]
        holding = []
        for sid, size in zip(d["vrh_scenes"], d["vrh_scene_sizes"]):
            scene = generate_scene(sid, d["vrh_seed"], haystack._scene_config(CFG, size))
            holding.append(sum(o.colour == colour and o.shape == shape for o in scene.objects))
        assert holding == [int(j == k) for j in range(4)], (i, holding)
        assert d["vrh_image_sizes"] == [[s, s] for s in d["vrh_scene_sizes"]] and len(set(d["vrh_scene_sizes"])) == 2
        ev = d["vrh_evidence"]
        assert ev["index"] == k and ev["kind"] == ("image_box" if mode == "locate" else "image")
        if mode == "locate":
            x1, y1, x2, y2 = ev["box"]
            assert ev["box"] == d["gt_box"] and 0 <= x1 < x2 <= d["image_width"] and 0 <= y1 < y2 <= d["image_height"]
        assert d == haystack.make_doc(i, {**CFG, "mode": mode}), "a pure function of (seed, i)"
        images = haystack.doc_to_visual(d)
        assert [im.size for im in images] == [tuple(s) for s in d["vrh_image_sizes"]]


def test_haystack_scoring_and_config(monkeypatch):
    d = haystack.make_doc(0, {**CFG, "mode": "which"})
    right, wrong = d["vrh_target"], str(int(d["vrh_target"]) % 4 + 1)
    assert haystack.process_results(d, [f"image {right}"])["acc"] == 1.0
    out = haystack.process_results(d, [wrong])
    assert out["acc"] == 0.0 and out["vrh_record"]["image_index"] == d["vrh_needle_index"]
    assert haystack.process_results(d, ["none"])["parse_failure"] == 1.0
    assert haystack.read_number("image 3", 4) == "3" and haystack.read_number("9 then 2", 4) is None
    assert haystack.read_number("[ 3 , 0", 4) is None and haystack.read_number("(2)", 4) is None
    monkeypatch.setenv(haystack.CONFIG_ENV, json.dumps({"n": 3, "mode": "which"}))
    assert haystack.haystack_config()["mode"] == "which" and haystack.haystack_config()["n"] == 3
    for bad, message in [({"mode": "find"}, "mode 'find' is not one of locate, which"),
                         ({"n_images": 1}, "n_images >= 2"), ({"count": 2}, r"unknown key\(s\) count")]:
        monkeypatch.setenv(haystack.CONFIG_ENV, json.dumps(bad))
        with pytest.raises(SourceError, match=message):
            haystack.haystack_config()
    assert "VRH_HAYSTACK_CONFIG" in DATA_VARIABLES
