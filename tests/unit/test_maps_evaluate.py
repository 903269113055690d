"""The locator's statistics on docs whose maps are known: located boxes, Acc@0.5 per head set, clustering by image,
and the intervals the report uses (vrh_lmms.base.stats) on those outcomes."""

from __future__ import annotations

import numpy as np
import pytest

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import HeadRef
from vrh_lmms.base.stats import accuracy, paired_drop
from vrh_lmms.runs.maps.collect import DocMaps, parse_docs
from vrh_lmms.runs.maps.evaluate import LocatorSet, evaluate_sets, locate_doc
from vrh_lmms.runs.maps.locator import LocatorSettings

CELL, SIDE = 28, 4  # 4 x 4 cells of 28 px
CELLS = np.array([(x, y, x + CELL, y + CELL) for y in range(0, SIDE * CELL, CELL) for x in range(0, SIDE * CELL, CELL)],
                 dtype=float)


def doc(doc_id: int, image: str, target: int, correct: bool) -> DocMaps:
    """Head L0H0 attends to the target cell only; L0H1 to the cell after it; L1H0 uniformly."""
    per_head = np.full((2, 2, SIDE * SIDE), 1.0 / (SIDE * SIDE))
    per_head[0, 0] = 0.0
    per_head[0, 0, target] = 1.0
    per_head[0, 1] = 0.0
    per_head[0, 1, (target + 1) % (SIDE * SIDE)] = 1.0
    x, y = CELLS[target, :2]
    return DocMaps(task="t", doc_id=doc_id, image_id=image, expression="e", answer="a", rows="answer", n_rows=1,
                   image_size=(SIDE * CELL, SIDE * CELL), gt_box=(x, y, x + CELL, y + CELL), per_head=per_head,
                   cells=CELLS, views=["image"] * len(CELLS), correct=correct)


SETS = [LocatorSet("top1", "topk", 1, None, (HeadRef(0, 0),)),
        LocatorSet("random1_s0", "random", 1, 0, (HeadRef(0, 1),)),
        LocatorSet("random1_s1", "random", 1, 1, (HeadRef(0, 0),)),
        LocatorSet("layer_matched1_s0", "layer_matched", 1, 0, (), unavailable="no live head left")]


def test_located_boxes_and_figures():
    docs = [doc(0, "a", 5, True), doc(1, "a", 6, False), doc(2, "b", 9, True), doc(3, "c", 15, True)]
    settings = LocatorSettings(sigma=0.0, threshold=0.5)
    located = [locate_doc(d, SETS, settings) for d in docs]
    assert located[0]["top1"] == ([28.0, 28.0, 56.0, 56.0], 1.0)  # cell 5: row 1, col 1
    assert located[0]["random1_s0"][1] == 0.0 and "layer_matched1_s0" not in located[0]
    result = evaluate_sets(docs, SETS, located)
    (row,) = result["rows"]
    clusters = np.array(["a", "a", "b", "c"])
    answer = np.array([1.0, 0.0, 1.0, 1.0])
    assert result["clustered_by"] == "image_id" and result["n_images"] == 3
    assert row["answer"]["mean"] == 0.75 and row["answer"]["n_clusters"] == 3
    assert row["answer"]["ci_low"] == pytest.approx(accuracy(answer, clusters, quantity="binary").ci_low)
    assert row["topk"]["mean"] == 1.0
    d = paired_drop(np.ones(4), answer, clusters, bootstrap=False)
    assert row["topk_minus_answer"]["diff"] == 0.25 and row["topk_minus_answer"]["ci_low"] == pytest.approx(d.ci_low)
    # the random control: one draw never locates, one always: per-doc share 0.5, draws 0 and 1
    assert row["random"]["per_seed"] == [0.0, 1.0] and row["random"]["mean"] == 0.5
    assert row["random"]["topk_minus"]["diff"] == 0.5
    assert row["layer_matched"] == {"draws": 0, "unavailable": ["layer_matched1_s0"]}
    assert result["sets"]["top1"]["iou"] == [1.0] * 4


def test_parse_docs():
    assert parse_docs("7,0,3,3") == [0, 3, 7] and parse_docs(None) is None
    with pytest.raises(VRHError, match="comma-separated integers"):
        parse_docs("0,x")
    with pytest.raises(VRHError, match=">= 0"):
        parse_docs("-1")
