"""Queries over candidate images: a seeded synthetic multi-image set and MMDocIR's page-level set.

A `CandidateSet` is the images one prompt shows; each `RankQuery` asks about one set and names its gold candidates.
Queries of one set share a cluster (their outcomes are not independent) and one null-query forward.

Synthetic set (`synth_set`): groups of N consecutive scenes of the vrh_lmms.base.synth stream (seeded, scene ids from
`start`). For each scene of a group, the query is the first object of it (the referent first,
synth.scenes.nameable_objects) whose colour and shape occur in no other scene of the group, so exactly one candidate
holds the referred object; a scene with no such object asks nothing. Groups are added until `n_queries` are made.

MMDocIR (`load_mmdocir`), the published evaluation set (huggingface.co/datasets/MMDocIR/MMDocIR_Evaluation_Dataset,
github.com/MMDocRAG/MMDocIR dataset/README.md): `MMDocIR_annotations.jsonl` has one line per document (`doc_name`,
`domain`, `page_indices` = [first, last] row of the document in `MMDocIR_pages.parquet`, `layout_indices`,
`questions`: items with `Q`, `A`, `type`, `page_id` = the 0-based evidence pages, `layout_mapping`);
`MMDocIR_pages.parquet` has one row per page (`doc_name`, `domain`, `passage_id`, `image_path`, `image_binary` JPEG
bytes, `ocr_text`, `vlm_text`). A document's pages are its candidates, its questions the queries.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.synth.scenes import expression_for, generate_scene, nameable_objects

ANNOTATIONS = "MMDocIR_annotations.jsonl"
PAGES = "MMDocIR_pages.parquet"


@dataclass
class CandidateSet:
    set_id: str
    images: list[Any]  # PIL images, prompt order
    names: list[str]


@dataclass
class RankQuery:
    query_id: str
    set_id: str
    text: str
    gold: list[int]  # indices into the set's candidates
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RankData:
    name: str
    sets: dict[str, CandidateSet]
    queries: list[RankQuery]
    notes: list[str] = field(default_factory=list)


def synth_set(n_queries: int, n_candidates: int, seed: int, start: int, cfg=None) -> RankData:
    """The synthetic multi-image set described in the module docstring."""
    if n_candidates < 2:
        raise VRHError(f"--candidates {n_candidates}: a ranking needs at least 2 candidates")
    if n_queries < 1:
        raise VRHError(f"--limit {n_queries}: ask at least one query")
    sets: dict[str, CandidateSet] = {}
    queries: list[RankQuery] = []
    group = 0
    while len(queries) < n_queries:
        if group > 50 * n_queries:
            raise VRHError("the scene stream yields no unique referents in groups this large; lower --candidates")
        ids = [start + group * n_candidates + j for j in range(n_candidates)]
        scenes = [generate_scene(i, seed, cfg) for i in ids]
        set_id = f"g{group}"
        made = 0
        for j, scene in enumerate(scenes):
            elsewhere = {(o.colour, o.shape) for k, s in enumerate(scenes) if k != j for o in s.objects}
            for obj_i in nameable_objects(scene):
                obj = scene.objects[obj_i]
                if (obj.colour, obj.shape) not in elsewhere and len(queries) < n_queries:
                    queries.append(RankQuery(f"{set_id}_q{j}", set_id, expression_for(obj), [j],
                                             {"scene_id": scene.scene_id, "bbox": list(obj.bbox)}))
                    made += 1
                    break
        if made:
            sets[set_id] = CandidateSet(set_id, [s.image for s in scenes], [f"scene {i}" for i in ids])
        group += 1
    return RankData(f"synth (seed {seed}, scenes from {start}, {n_candidates} candidates)", sets, queries)


def load_mmdocir(folder: str | Path, limit: int | None = None, max_pages: int | None = None) -> RankData:
    """MMDocIR's page-level queries from `folder` (the two published files); documents with more than `max_pages`
    pages are left out (counted in `notes`). `limit`: at most this many queries, in file order."""
    # deferred: keeps `vrh-lmms rank-train --help` free of pyarrow
    import pyarrow.parquet as pq

    root = Path(folder)
    ann, pages_path = root / ANNOTATIONS, root / PAGES
    for p in (ann, pages_path):
        if not p.is_file():
            raise VRHError(f"--data mmdocir:{folder}: no {p.name} there (MMDocIR's published files: {ANNOTATIONS}, "
                           f"{PAGES})")
    pages = pq.ParquetFile(pages_path)
    docs = pages.read(columns=["doc_name"]).column("doc_name").to_pylist()  # page images are read per document
    sets: dict[str, CandidateSet] = {}
    queries: list[RankQuery] = []
    skipped = 0
    for line_no, line in enumerate(ann.read_text().splitlines(), 1):
        if not line.strip():
            continue
        if limit is not None and len(queries) >= limit:
            break
        try:
            doc = json.loads(line)
            name, (first, last), items = doc["doc_name"], doc["page_indices"], doc["questions"]
        except (ValueError, KeyError, TypeError) as exc:
            raise VRHError(f"{ann}:{line_no}: not an MMDocIR annotation line ({exc})") from None
        n_pages = int(last) - int(first) + 1
        if max_pages is not None and n_pages > max_pages:
            skipped += 1
            continue
        if not (0 <= first <= last < len(docs)) or any(docs[r] != name for r in range(first, last + 1)):
            raise VRHError(f"{ann}:{line_no}: page_indices {[first, last]} are not the rows of {name!r} in {PAGES}")
        for qi, item in enumerate(items):
            if limit is not None and len(queries) >= limit:
                break
            gold = sorted({int(p) for p in item["page_id"]})
            if not gold or gold[0] < 0 or gold[-1] >= n_pages:
                raise VRHError(f"{ann}:{line_no}: question {qi} page_id {gold} outside the document's {n_pages} "
                               f"pages")
            queries.append(RankQuery(f"{name}#{qi}", name, str(item["Q"]), gold, {"type": item.get("type")}))
        if name not in sets and any(q.set_id == name for q in queries):
            sets[name] = _doc_pages(pages, name, first, last)
    notes = [f"{skipped} documents with more than {max_pages} pages left out"] if skipped else []
    if not queries:
        raise VRHError(f"--data mmdocir:{folder}: no question to rank" + (f" ({notes[0]})" if notes else ""))
    return RankData(f"MMDocIR pages ({root})", sets, queries, notes)


def _doc_pages(pages, name: str, first: int, last: int) -> CandidateSet:
    """Rows first..last (inclusive) of the pages parquet, reading only the row groups that hold them (the published
    file is 2.5 GB of JPEGs)."""
    # deferred: keeps `vrh-lmms rank-train --help` free of pyarrow
    import pyarrow as pa

    groups, start = [], 0
    for i in range(pages.metadata.num_row_groups):
        n = pages.metadata.row_group(i).num_rows
        if start <= last and start + n > first:
            groups.append((i, start))
        start += n
    table = pa.concat_tables([pages.read_row_group(i, columns=["image_binary"]) for i, _ in groups])
    rows = table.slice(first - groups[0][1], last - first + 1)
    images = [Image.open(io.BytesIO(b)).convert("RGB") for b in rows.column("image_binary").to_pylist()]
    return CandidateSet(name, images, [f"page {i}" for i in range(len(images))])


def parse_data(text: str) -> tuple[str, str | None]:
    """"synth" -> ("synth", None); "mmdocir:PATH" -> ("mmdocir", PATH)."""
    if text == "synth":
        return "synth", None
    if text.startswith("mmdocir:") and len(text) > len("mmdocir:"):
        return "mmdocir", text[len("mmdocir:"):]
    raise VRHError(f"--data {text!r}: use 'synth' or 'mmdocir:<folder with {ANNOTATIONS} and {PAGES}>'")
