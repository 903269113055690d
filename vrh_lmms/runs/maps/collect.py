"""An lmms-eval run over chosen docs -> one `DocMaps` per doc: every head's attention over the image's cells, from
the model's own answer teacher-forced on the backend's own inputs (discovery's interception path), with the
ground-truth box and the model's predicted box and Acc@0.5 as the task scored them (`vrh_record`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from vrh_lmms.base.errors import VRHError
from vrh_lmms.harness import lmms
from vrh_lmms.model.capture.extras import layout_extras
from vrh_lmms.model.capture.layouts import image_token_map
from vrh_lmms.model.capture.teacher_forced import teacher_forced_inputs
from vrh_lmms.runs.discovery.collector import backend_processor, stop_token_ids
from vrh_lmms.runs.discovery.interceptor import DocTracker, GenerateInterceptor
from vrh_lmms.runs.discovery.queries import answer_length, token_pieces
from vrh_lmms.runs.discovery.targets import target_from_doc
from vrh_lmms.runs.maps.capture import ROWS, image_attention, query_rows


@dataclass
class DocMaps:
    """One doc: per_head (layers, heads, n_tokens) attention on the image tokens that have a cell (`cells`, pixels,
    `views` per token, ImageTokenMap order); the task's scoring of the model's answer (pred_box None: unparsed)."""

    task: str
    doc_id: int
    image_id: str
    expression: str
    answer: str
    rows: str
    n_rows: int
    image_size: tuple[int, int]
    gt_box: tuple[float, float, float, float]
    per_head: np.ndarray | None  # None once a caller has reduced it (collect_maps' on_doc)
    cells: np.ndarray
    views: list[str]
    image: np.ndarray | None = None  # (h, w, 3) uint8 when kept for figures
    pred_box: tuple[float, float, float, float] | None = None
    correct: bool | None = None


def parse_docs(text: str | None) -> list[int] | None:
    """"0,3,7" -> [0, 3, 7]; None or "" -> None (every doc up to the limit)."""
    if not text:
        return None
    try:
        docs = sorted({int(t) for t in text.split(",") if t.strip()})
    except ValueError:
        raise VRHError(f"--docs {text!r}: give doc ids as comma-separated integers, e.g. 0,3,7") from None
    if not docs or docs[0] < 0:
        raise VRHError(f"--docs {text!r}: doc ids are integers >= 0")
    return docs


class MapCollector:
    """GenerateInterceptor callback: capture the maps of wanted docs; others get an empty answer without running
    the model (their generation would only cost time), and are left out of the results."""

    def __init__(self, lm, rows: str, wanted: set[int] | None, keep_images: bool,
                 on_doc: Callable[[DocMaps], None] | None = None) -> None:
        self.lm, self.rows, self.wanted, self.keep_images = lm, rows, wanted, keep_images
        self.model = lm.model
        self.family = lm.vrh_family_spec
        self.processor = backend_processor(lm)
        self.tokenizer = getattr(lm, "tokenizer", None) or self.processor.tokenizer
        self.stop_ids = stop_token_ids(lm, self.model)
        self.maps: dict[tuple[str, int], DocMaps] = {}
        self.on_doc = on_doc

    def skip(self, ctx) -> tuple[torch.Tensor, bool] | None:
        if self.wanted is None or ctx.doc_id in self.wanted:
            return None
        stop = min(self.stop_ids) if self.stop_ids else 0
        return torch.tensor([stop]), True

    def __call__(self, ctx, tensors: dict[str, torch.Tensor], continuation: torch.Tensor,
                 output_includes_prompt: bool = True) -> None:
        where = f"{ctx.task} doc {ctx.doc_id}"
        target = target_from_doc(ctx.doc, where=where)
        cont = continuation.detach().cpu()
        answer = cont[:answer_length(cont.tolist(), self.stop_ids)]
        prompt = tensors["input_ids"][0].detach().cpu()
        inputs = teacher_forced_inputs(tensors, answer, self.family.forward_fills)
        pieces = token_pieces(self.tokenizer, inputs["input_ids"][0].tolist())
        rows = query_rows(self.rows, prompt.numel(), answer.numel(), pieces, target.expression)
        if not rows:
            raise VRHError(f"{where}: no {self.rows!r} query rows (empty answer, or the expression is not in the "
                           f"prompt); try --rows last")
        extras = layout_extras(self.family.name, self.processor, tensors, 0, backend=self.lm)
        tmap = image_token_map(self.family.name, prompt, target.image_size, extras)
        per_head = image_attention(self.model, inputs, rows, tmap)
        image = None
        if self.keep_images and hasattr(ctx.doc.get("image"), "convert"):
            image = np.asarray(ctx.doc["image"].convert("RGB"))
        doc = DocMaps(
            task=ctx.task, doc_id=ctx.doc_id, image_id=target.image_id, expression=target.expression,
            answer=self.tokenizer.decode(answer.tolist(), skip_special_tokens=True), rows=self.rows,
            n_rows=len(rows), image_size=target.image_size, gt_box=target.box, per_head=per_head,
            cells=tmap.cells.numpy().astype(float), views=list(tmap.view), image=image)
        if self.on_doc is not None:
            self.on_doc(doc)
        self.maps[(ctx.task, ctx.doc_id)] = doc


def _attach_scores(maps: dict[tuple[str, int], DocMaps], results: dict[str, Any]) -> None:
    """The task's own scoring of each captured doc's answer (vrh_record: pred_box, correct)."""
    for task, rows in (results.get("samples") or {}).items():
        for row in rows:
            key = (task, int(row["doc_id"]))
            if key not in maps:
                continue
            record = row.get("vrh_record")
            if not isinstance(record, dict) or record.get("kind") != "grounding":
                raise VRHError(f"{task} doc {key[1]}: the task wrote no grounding vrh_record; attention maps and the "
                               f"locator need a vrh grounding task (e.g. vrh_refcoco_val, vrh_synth_grounding)")
            pred = record.get("pred_box")
            maps[key].pred_box = None if pred is None else tuple(float(v) for v in pred)  # type: ignore[assignment]
            maps[key].correct = bool(record.get("correct"))


def collect_maps(lm, tasks: Sequence[str], tm, docs: Sequence[int] | None, limit: int | None, rows: str,
                 gen_kwargs: str | None = None, keep_images: bool = False, seed: int = 0,
                 on_doc: Callable[[DocMaps], None] | None = None) -> list[DocMaps]:
    """Run `tasks` through lmms-eval on `lm` (batch size 1) and capture the maps of `docs` (None: every doc up to
    `limit`). Returns them in task, doc order. `on_doc` sees each doc as it is captured (and may drop its
    per_head maps to keep memory flat on long runs)."""
    if rows not in ROWS:
        raise VRHError(f"--rows {rows!r}: use one of {', '.join(ROWS)}")
    if getattr(lm, "batch_size", 1) != 1:
        raise VRHError("attention maps are captured with batch_size 1")
    if docs is not None:
        limit = max(docs) + 1
    tracker = DocTracker(lm.task_dict)
    lm.task_dict = tracker
    collector = MapCollector(lm, rows, None if docs is None else set(docs), keep_images, on_doc)
    interceptor = GenerateInterceptor(lm.model, tracker, collector, collector.skip)
    try:
        results = lmms.evaluate(lm, list(tasks), tm, limit=limit, gen_kwargs=gen_kwargs, seed=seed)
    finally:
        interceptor.uninstall()
        lm.task_dict = dict(tracker)
    if results is None:
        raise VRHError("attention maps run in one process; start without torchrun / accelerate launch")
    _attach_scores(collector.maps, results)
    if docs is not None:
        for task in tasks:
            missing = [d for d in docs if (task, d) not in collector.maps]
            if missing:
                n = len((results.get("samples") or {}).get(task, []))
                raise VRHError(f"{task} has no doc {missing[0]} (it has {n} docs up to the limit)")
    return [collector.maps[k] for k in sorted(collector.maps)]
