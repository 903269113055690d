"""REFER `refs(<split_by>).p` files are read as plain data only: the real layout loads, a pickle that would run code
is refused in one line before anything in it runs."""

from __future__ import annotations

import json
import os
import pickle
import struct

import pytest
from PIL import Image

from vrh_lmms.base.errors import VRHError
from vrh_lmms.tasks.common.refer import load_refs, read_refer

# One ref in the official schema (lichengunc/refer: refs are dicts with these keys, bbox in instances.json is xywh).
REF = {"sent_ids": [0, 1], "file_name": "COCO_train2014_000000000042_7.jpg", "ann_id": 7, "ref_id": 0,
       "image_id": 42, "split": "testA", "category_id": 1,
       "sentences": [{"tokens": ["man", "on", "left"], "raw": "Man on left", "sent_id": 0, "sent": "man on left"},
                     {"tokens": ["left", "guy"], "raw": "left guy", "sent_id": 1, "sent": "left guy"}]}


def py2_pickle(obj) -> bytes:
    """Protocol 2 as Python 2's cPickle wrote the official files: `str` values as (SHORT_)BINSTRING byte strings,
    which Python 3 decodes on load."""

    def enc(o) -> bytes:
        if isinstance(o, str):
            b = o.encode("ascii")
            return (b"U" + bytes([len(b)]) if len(b) < 256 else b"T" + struct.pack("<i", len(b))) + b
        if isinstance(o, bool) or not isinstance(o, (int, float, list, dict)):
            raise TypeError(o)
        if isinstance(o, int):
            return b"K" + bytes([o]) if 0 <= o < 256 else b"J" + struct.pack("<i", o)
        if isinstance(o, float):
            return b"G" + struct.pack(">d", o)
        if isinstance(o, list):
            return b"](" + b"".join(enc(x) for x in o) + b"e"
        return b"}(" + b"".join(enc(k) + enc(v) for k, v in o.items()) + b"u"

    return b"\x80\x02" + enc(obj) + b"."


def write_layout(root, refs_bytes: bytes):
    data = root / "refcoco"
    (root / "images").mkdir(parents=True)
    data.mkdir()
    Image.new("RGB", (64, 48)).save(root / "images" / "COCO_train2014_000000000042.jpg")
    (data / "instances.json").write_text(json.dumps({
        "images": [{"id": 42, "file_name": "COCO_train2014_000000000042.jpg", "width": 64, "height": 48}],
        "annotations": [{"id": 7, "image_id": 42, "category_id": 1, "bbox": [4.0, 6.0, 20.0, 30.0], "area": 600.0,
                         "iscrowd": 0, "segmentation": [[4, 6, 24, 6, 24, 36, 4, 36]]}],
        "categories": [{"id": 1, "name": "person", "supercategory": "person"}]}))
    (data / "refs(unc).p").write_bytes(refs_bytes)
    return data / "refs(unc).p"


def test_python2_refs_file_loads_as_plain_data(tmp_path):
    raw = py2_pickle([REF])
    assert b"U\x05split" in raw  # byte strings, as Python 2 wrote them
    assert load_refs(write_layout(tmp_path, raw)) == [REF] == pickle.loads(raw)
    docs = read_refer(tmp_path, "refcoco", "testA")
    assert [d["expression"] for d in docs] == ["man on left", "left guy"]
    assert docs[0]["gt_box"] == [4.0, 6.0, 24.0, 36.0] and docs[0]["question_id"] == "0"


def test_protocol_2_from_python3_loads(tmp_path):
    path = write_layout(tmp_path, pickle.dumps([REF, dict(REF, ref_id=1, split="val")], protocol=2))
    assert [r["ref_id"] for r in load_refs(path)] == [0, 1]


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_pickle_that_runs_code_is_refused_in_one_line(tmp_path, protocol):
    marker = tmp_path / "ran"
    path = write_layout(tmp_path / "root", pickle.dumps([dict(REF, sentences=[_Payload(marker)])], protocol=protocol))
    with pytest.raises(VRHError) as err:
        read_refer(tmp_path / "root", "refcoco", "testA")
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg and "system" in msg
    assert not marker.exists()
    with pytest.raises(ValueError):  # also a SourceError, as the grounding loaders report their sources' errors
        load_refs(path)
