"""doc_views (the runs floor's per-head maps and thumbnails) and how the explorer's data read them back."""

from __future__ import annotations

import base64

import numpy as np
from PIL import Image

from vrh_lmms.report.explorer_data import doc_views_block
from vrh_lmms.runs.maps.collect import DocMaps
from vrh_lmms.runs.maps.doc_views import FOLDER, MAPS_JSON, thumbnail_png, write_head_maps


def _doc(rng, doc_id: int) -> DocMaps:
    # a 2 x 3 grid of 10-px cells, tokens listed column by column (the grid, not the token order, is the layout)
    cells = np.array([[x, y, x + 10, y + 10] for x in (0, 10, 20) for y in (0, 10)], dtype=float)
    return DocMaps(task="t", doc_id=doc_id, image_id=str(doc_id), expression="the <b>cat</b>", answer="[0, 0, 9, 9]",
                   rows="answer", n_rows=3, image_size=(30, 20), gt_box=(0.0, 0.0, 10.0, 10.0),
                   per_head=rng.random((2, 4, 6)).astype(np.float32), cells=cells, views=["image"] * 6,
                   pred_box=(1.0, 0.0, 11.0, 10.0), correct=True)


def test_saved_maps_are_each_head_over_the_grid_and_read_back_scaled(tmp_path):
    rng = np.random.default_rng(0)
    docs = [_doc(rng, 3), _doc(rng, 5)]
    write_head_maps(docs, tmp_path, {"model": "m"})
    assert (tmp_path / FOLDER / MAPS_JSON).is_file()
    block = doc_views_block([tmp_path / "elsewhere", tmp_path / FOLDER])
    assert [d["doc_id"] for d in block["maps"]["docs"]] == ["3", "5"]
    for doc, shown in zip(docs, block["maps"]["docs"], strict=True):
        assert (shown["rows"], shown["cols"]) == (2, 3) and shown["expression"] == "the <b>cat</b>"
        cells = np.frombuffer(base64.b64decode(shown["cells"]), dtype=np.uint8).reshape(2, 4, 2, 3)
        for layer in range(2):
            for head in range(4):
                # token i covers cell (row = i % 2, col = i // 2): the grid put it there
                expected = doc.per_head[layer, head].reshape(3, 2).T.astype(np.float16).astype(float)
                top = shown["scale"][layer * 4 + head]
                assert top == float(f"{expected.max():.4g}")
                assert np.abs(cells[layer, head] - np.rint(255 * expected / expected.max())).max() <= 1


def test_thumbnail_keeps_the_aspect_and_caps_the_longer_side():
    image = Image.new("RGB", (640, 320), (200, 10, 10))
    png = thumbnail_png(image, max_side=160)
    import io

    with Image.open(io.BytesIO(png)) as im:
        assert im.size == (160, 80)
    small = thumbnail_png(Image.new("RGB", (100, 50)), max_side=160)
    with Image.open(io.BytesIO(small)) as im:
        assert im.size == (100, 50)  # never enlarged


def test_doc_views_of_other_docs_are_left_out_with_a_note(tmp_path):
    from vrh_lmms.report.explorer_data import explorer_data

    rng = np.random.default_rng(1)
    write_head_maps([_doc(rng, 3)], tmp_path, {"model": "m"})
    group = {"model": "m", "task": "t", "baseline": {"label": "baseline", "kind": "baseline", "samples": None},
             "configs": [], "summary": []}
    report = {"groups": [group]}
    lines = tmp_path / "samples.jsonl"

    def data(expression: str) -> dict:
        lines.write_text('{"doc_id": 3, "vrh_record": {"expression": "%s", "correct": true}}\n' % expression)
        group["baseline"]["samples"] = str(lines)
        return explorer_data(report, [tmp_path], [], [tmp_path / FOLDER], "t")

    same = data("the <b>cat</b>")
    assert same["doc_views"]["maps"] and not same["notes"]
    other = data("the dog")
    assert other["doc_views"]["maps"] is None and "of other docs" in other["notes"][0]
