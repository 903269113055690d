"""The real haystack loaders read fixtures in the published schemas: MM-NIAH retrieval subsets
(github.com/OpenGVLab/MM-NIAH README "Data Format", huggingface.co/datasets/OpenGVLab/MM-NIAH) and Visual Haystacks
single-needle (huggingface.co/datasets/tsunghanwu/visual_haystacks, github.com/visual-haystacks/vhs_benchmark).
Each doc's images come in prompt order, its evidence says where the needle is, a missing folder or file is one
line naming it and its variable, and replies are scored as the benchmarks score them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vrh_lmms.base.errors import VRHError
from vrh_lmms.runs.discovery.text_span import needle_chars, text_evidence
from vrh_lmms.tasks.common import haystack_media as H
from vrh_lmms.tasks.common import mm_niah as M
from vrh_lmms.tasks.common import visual_haystacks as V

FIXTURES = Path(__file__).parents[1] / "fixtures"
MMNIAH, VHS = FIXTURES / "mm_niah", FIXTURES / "visual_haystacks"


def _records(name: str, split: str = "val") -> list[dict]:
    path = MMNIAH / f"mm_niah_{split}" / "annotations" / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _pixel(path_or_image) -> tuple:
    im = path_or_image if isinstance(path_or_image, Image.Image) else Image.open(path_or_image).convert("RGB")
    return im.getpixel((im.size[0] // 2, im.size[1] // 2))


@pytest.fixture
def mmniah(vrh_env):
    vrh_env.setenv("VRH_MMNIAH_DIR", str(MMNIAH))
    return vrh_env


@pytest.fixture
def vhs(vrh_env):
    vrh_env.setenv("VRH_VHS_DIR", str(VHS / "VHs_qa"))
    vrh_env.setenv("VRH_VHS_IMAGES", str(VHS / "coco"))
    vrh_env.setenv("VRH_VHS_SIZE", "3")
    return vrh_env


# ------------------------------------------------------------------------------------------------ MM-NIAH
def test_mmniah_text_docs_interleave_images_and_place_the_needle(mmniah):
    mmniah.setenv("VRH_MMNIAH_DOCS", "all")
    docs = M.vrh_mmniah_retrieval_text(None)
    records = _records("retrieval-text")
    assert len(docs) == len(records) == 3
    doc, rec = docs[0], records[0]
    images = MMNIAH / "mm_niah_val" / "images"
    assert doc["vrh_images"] == [str(images / p) for p in rec["images_list"]]
    assert doc["vrh_image_sizes"] == [list(Image.open(p).size) for p in doc["vrh_images"]]
    want = (rec["context"].replace("<image>", "<image 1>", 1).replace("<image>", "<image 2>", 1) + "\n"
            + rec["question"] + "\n" + M.OPEN_INSTRUCTION)
    assert doc["vrh_prompt"] == want and H.doc_to_text(doc) == want
    assert [_pixel(im) for im in H.doc_to_visual(doc)] == [_pixel(p) for p in doc["vrh_images"]]
    assert doc["vrh_target"] == "seven" and doc["vrh_split"] == "val"
    for d, r in zip(docs, records):  # the needle is found exactly once in the rendered text, where it was put
        if d["vrh_evidence"] is None:
            continue
        assert d["vrh_evidence"]["kind"] == "text" and d["vrh_evidence"]["text"] == r["meta"]["needles"][0]
        text = H.doc_to_text(d)
        begin, end = needle_chars(text, text_evidence(d))
        assert text[begin:end] == r["meta"]["needles"][0] and text.count(text[begin:end]) == 1
    # a needle spelled twice cannot be placed: no evidence, and the doc says why
    assert docs[2]["vrh_evidence"] is None and "2 times" in docs[2]["vrh_evidence_note"]
    assert [d["vrh_evidence"] is not None for d in docs] == [True, True, False]


def test_mmniah_image_docs_name_the_needle_image_when_the_record_does(mmniah):
    mmniah.setenv("VRH_MMNIAH_DOCS", "all")
    docs = M.vrh_mmniah_retrieval_image(None)
    records = _records("retrieval-image")
    pasted, text_options = docs[0], docs[1]
    rec = records[0]
    # context images then the picture options, numbered in prompt order
    names = rec["images_list"] + rec["meta"]["choices_image_path"]
    assert pasted["vrh_images"] == [str(MMNIAH / "mm_niah_val" / "images" / n) for n in names]
    assert pasted["vrh_prompt"].endswith("\nA. <image 4>\nB. <image 5>\nC. <image 6>\nD. <image 7>\n"
                                         + M.MC_INSTRUCTION)
    assert pasted["vrh_prompt"].count("<image ") == 7 and "<image>" not in pasted["vrh_prompt"]
    assert pasted["vrh_target"] == "C" and json.loads(pasted["vrh_answer"]) == 2
    assert pasted["vrh_evidence"] == {"kind": "image", "index": 1}
    assert rec["images_list"][1] == rec["meta"]["needles"][0]
    # text options; the needle is named only by its picture's own path: the record does not tell which image
    assert text_options["vrh_prompt"].endswith("\nA. bear\nB. kite\nC. lamp\nD. frog\n" + M.MC_INSTRUCTION)
    assert len(text_options["vrh_images"]) == 2 and text_options["vrh_target"] == "A"
    assert text_options["vrh_evidence"] is None and "does not tell" in text_options["vrh_evidence_note"]


def test_mmniah_keeps_the_records_with_evidence_unless_asked(mmniah, tmp_path):
    """Discovery needs the needle's place: by default only records that tell it are docs; `all` keeps the rest."""
    assert [d["question_id"] for d in M.vrh_mmniah_retrieval_text(None)] == ["0", "1"]
    assert [d["vrh_evidence"] for d in M.vrh_mmniah_retrieval_image(None)] == [{"kind": "image", "index": 1}]
    mmniah.setenv("VRH_MMNIAH_DOCS", "all")
    assert len(M.vrh_mmniah_retrieval_image(None)) == 2
    root = tmp_path / "mm_niah_val"
    shutil.copytree(MMNIAH / "mm_niah_val", root)
    ann = root / "annotations" / "retrieval-image.jsonl"
    ann.write_text(ann.read_text().splitlines()[1] + "\n")  # only the record that does not tell
    mmniah.setenv("VRH_MMNIAH_DIR", str(root))
    assert len(M.vrh_mmniah_retrieval_image(None)) == 1
    mmniah.setenv("VRH_MMNIAH_DOCS", "evidence")
    with pytest.raises(VRHError, match=r"none of the 1 records tells where the needle is .*VRH_MMNIAH_DOCS=all"):
        M.vrh_mmniah_retrieval_image(None)
    mmniah.setenv("VRH_MMNIAH_DOCS", "some")
    with pytest.raises(VRHError, match="VRH_MMNIAH_DOCS='some'"):
        M.vrh_mmniah_retrieval_image(None)


def test_mmniah_split_and_limit(mmniah):
    mmniah.setenv("VRH_MMNIAH_SPLIT", "test")
    docs = M.vrh_mmniah_retrieval_text(None)
    assert len(docs) == 1 and docs[0]["vrh_split"] == "test"
    assert docs[0]["vrh_images"][0].startswith(str(MMNIAH / "mm_niah_test" / "images"))
    mmniah.setenv("VRH_MMNIAH_SPLIT", "val")
    mmniah.setenv("VRH_MMNIAH_LIMIT", "2")
    assert len(M.vrh_mmniah_retrieval_text(None)) == 2
    mmniah.setenv("VRH_MMNIAH_LIMIT", "")
    mmniah.setenv("VRH_MMNIAH_DOCS", "all")
    mmniah.setenv("VRH_MMNIAH_MAX_CONTEXT", "800")  # the records' meta.context_length: 900, 700, 120
    assert [d["question_id"] for d in M.vrh_mmniah_retrieval_text(None)] == ["1", "2"]
    mmniah.setenv("VRH_MMNIAH_SPLIT", "dev")
    with pytest.raises(VRHError, match="VRH_MMNIAH_SPLIT='dev'"):
        M.vrh_mmniah_retrieval_text(None)


def test_mmniah_missing_data_is_one_line(vrh_env, tmp_path):
    with pytest.raises(VRHError, match="VRH_MMNIAH_DIR is not set"):
        M.vrh_mmniah_retrieval_text(None)
    root = tmp_path / "snap"
    shutil.copytree(MMNIAH / "mm_niah_val", root / "mm_niah_val")
    vrh_env.setenv("VRH_MMNIAH_DIR", str(root))
    with pytest.raises(VRHError, match=r"missing annotations file .*mm_niah_val/annotations/retrieval-text.jsonl"):
        (root / "mm_niah_val" / "annotations" / "retrieval-text.jsonl").unlink()
        M.vrh_mmniah_retrieval_text(None)
    (root / "mm_niah_val" / "images" / "obelics" / "doc_0002_img_2.jpg").unlink()
    with pytest.raises(VRHError) as err:
        M.vrh_mmniah_retrieval_image(None)
    msg = str(err.value)
    assert "\n" not in msg and "missing image file obelics/doc_0002_img_2.jpg" in msg and "VRH_MMNIAH_DIR" in msg
    shutil.rmtree(root / "mm_niah_val" / "images")
    with pytest.raises(VRHError) as err:
        M.vrh_mmniah_retrieval_image(None)
    msg = str(err.value)
    assert "\n" not in msg and f"missing media folder {root / 'mm_niah_val' / 'images'}" in msg
    assert "VRH_MMNIAH_DIR" in msg
    vrh_env.setenv("VRH_MMNIAH_IMAGES", str(tmp_path / "elsewhere"))
    with pytest.raises(VRHError, match="missing media folder .*elsewhere .*set by VRH_MMNIAH_IMAGES"):
        M.vrh_mmniah_retrieval_image(None)


@pytest.mark.parametrize(("reply", "answer", "correct", "parsed"), [
    ("Oak.", "oak", True, True), ("The magic word is oak", "oak", True, True), ("an oak tree", "oak", True, True),
    ("oaks", "oak", False, True), ("three", "3", True, True), ("", "oak", False, False)])
def test_mmniah_open_answers_score_as_the_benchmark(reply, answer, correct, parsed):
    doc = {"vrh_answer": json.dumps(answer), "vrh_target": answer, "image_id": "x", "question_id": "0"}
    out = M.process_results(doc, [reply])
    assert out["acc"] == float(correct) and out["parse_failure"] == float(not parsed)


@pytest.mark.parametrize(("reply", "correct", "pred"), [
    ("C", True, "C"), ("c. the lamp", True, "C"), ("The answer is C.", True, "C"), ("**C**", True, "C"),
    ("2", True, "C"), ("B", False, "B"), ("(C)", False, None), ("lamp", False, None)])
def test_mmniah_options_score_as_the_benchmark(reply, correct, pred):
    doc = {"vrh_answer": json.dumps(2), "vrh_target": "C", "image_id": "x", "question_id": "0"}
    out = M.process_results(doc, [reply])
    assert out["acc"] == float(correct) and out["vrh_record"]["pred"] == pred


# ------------------------------------------------------------------------------------------------ Visual Haystacks
def test_vhs_docs_put_the_needle_at_its_seeded_index(vhs):
    docs = V.vrh_visual_haystacks_single(None)
    entries = json.loads((VHS / "VHs_qa" / "single_needle" / "VHs_large" / "visual_haystack_3.json").read_text())
    assert len(docs) == len(entries) == 3
    for i, (doc, entry) in enumerate(zip(docs, entries)):
        at = doc["vrh_evidence"]["index"]
        assert doc["vrh_evidence"] == {"kind": "image", "index": at}
        assert at == int(np.random.default_rng([0, i]).integers(0, len(entry["neg_image"]) + 1))
        want = entry["neg_image"][:at] + entry["pos_image"] + entry["neg_image"][at:]
        assert doc["vrh_images"] == [str(VHS / "coco" / p) for p in want]
        shown = H.doc_to_visual(doc)
        assert _pixel(shown[at]) == _pixel(VHS / "coco" / entry["pos_image"][0])
        assert [list(im.size) for im in shown] == doc["vrh_image_sizes"]
        assert H.doc_to_text(doc) == V.PREFIX + entry["conversations"][0]["value"]
        assert doc["vrh_target"] == entry["conversations"][1]["value"]
    assert {d["vrh_evidence"]["index"] for d in docs} != {0}, "the needle is not always first"
    again = V.vrh_visual_haystacks_single(None)
    assert [d["vrh_images"] for d in again] == [d["vrh_images"] for d in docs]
    vhs.setenv("VRH_VHS_SIZE", "oracle")
    (oracle,) = V.vrh_visual_haystacks_single(None)
    assert oracle["vrh_evidence"]["index"] == 0 and len(oracle["vrh_images"]) == 1


def test_vhs_missing_data_is_one_line(vhs, tmp_path):
    vhs.setenv("VRH_VHS_SIZE", "5")
    with pytest.raises(VRHError, match=r"missing annotations file .*VHs_large/visual_haystack_5.json"):
        V.vrh_visual_haystacks_single(None)
    vhs.setenv("VRH_VHS_SIZE", "3")
    vhs.setenv("VRH_VHS_IMAGES", str(tmp_path / "coco"))
    with pytest.raises(VRHError, match=r"VRH_VHS_IMAGES=.*coco: no such folder"):
        V.vrh_visual_haystacks_single(None)
    shutil.copytree(VHS / "coco", tmp_path / "coco")
    (tmp_path / "coco" / "val2017" / "000000000632.jpg").unlink()
    with pytest.raises(VRHError) as err:
        V.vrh_visual_haystacks_single(None)
    msg = str(err.value)
    assert "\n" not in msg and "missing image file val2017/000000000632.jpg" in msg and "VRH_VHS_IMAGES" in msg


@pytest.mark.parametrize(("reply", "target", "acc", "failed"), [
    ("Yes.", "yes", 1.0, 0.0), ("yes, there is", "yes", 1.0, 0.0), ("No", "yes", 0.0, 0.0),
    ("I cannot tell", "no", 0.0, 1.0), ("Nothing", "no", 0.0, 1.0)])
def test_vhs_yes_no_scoring(reply, target, acc, failed):
    doc = {"vrh_target": target, "image_id": "x", "question_id": "0", "vrh_evidence": {"kind": "image", "index": 1},
           "vrh_images": ["a", "b"]}
    out = V.process_results(doc, [reply])
    assert out["acc"] == acc and out["parse_failure"] == failed
    assert out["vrh_record"]["needle_index"] == 1 and out["vrh_record"]["n_images"] == 2


def test_vhs_reads_each_shared_image_once(vhs, monkeypatch):
    """Haystacks share images (VHs: up to 10,000 COCO distractors a question): each file is checked and its size
    read once per load."""
    reads = []
    real = H._header_size
    monkeypatch.setattr(H, "_header_size", lambda p: reads.append(p) or real(p))
    docs = V.vrh_visual_haystacks_single(None)
    shown = [p for d in docs for p in d["vrh_images"]]
    assert len(shown) == 9 and sorted(reads) == sorted(set(shown)) and len(reads) == 6
