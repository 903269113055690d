"""The explorer's data: what one page shows of a report and the files it read, as one JSON-able dict.

Read from files only (docs/reports.md, "The explorer"): report.json (the groups, their configurations, drops and
intervals, the k-curve's rows), each configuration's lmms-eval sample file (every doc's expression, ground-truth box,
answer box and raw answer), the heads files (every scoring cell of the design space) and, where a run saved them, the
doc views of `vrh_lmms.runs.maps.doc_views` (thumbnails and per-head attention over sample docs). Nothing here is
markup: the page puts every string in with textContent.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.base.paths import shown_model, shown_path

DOC_VIEWS = "doc_views"  # vrh_lmms.runs.maps.doc_views.FOLDER (a lower floor's name, repeated: report reads files)
MAPS_JSON, MAPS_NPZ = "head_maps.json", "head_maps.npz"
STATUS_CODES = {"correct": "c", "mislocated": "m", "parse_failure": "p", "wrong": "w"}


def resolve(shown: str | None, roots: Sequence[Path]) -> Path | None:
    """A path report.json records (relative to the folder the report ran in) as a file here: as it is, else under
    one of `roots` with its leading folders dropped one by one, the longest tail first (a run folder moved or
    reported from elsewhere: `runs/demo/sweep/configs/top5/...` under the demo folder's `sweep/`)."""
    if not shown:
        return None
    path = Path(shown).expanduser()
    if path.is_file():
        return path
    parts = [p for p in path.parts if p not in ("..", ".", "/")]
    for i in range(len(parts)):
        for root in roots:
            candidate = root.joinpath(*parts[i:])
            if candidate.is_file():
                return candidate
    return None


def _round(values: Iterable[float] | None, digits: int = 2) -> list[float] | None:
    return None if values is None else [round(float(v), digits) for v in values]


def _sample_rows(path: Path) -> dict[str, dict]:
    """doc id -> what the explorer shows of one sample line (vrh_record where the task wrote one)."""
    out = {}
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            row = json.loads(line)
            record = row.get("vrh_record") if isinstance(row.get("vrh_record"), dict) else {}
            resps = row.get("filtered_resps") or row.get("resps") or [""]
            raw = record.get("raw", resps[0] if resps else "")
            while isinstance(raw, list):
                raw = raw[0] if raw else ""
            out[str(row["doc_id"])] = {"record": record, "doc": row.get("doc") or {}, "raw": str(raw)}
    return out


def _score(record: dict, fallback: float | None) -> float | None:
    if "correct" in record:
        return 1.0 if record["correct"] else 0.0
    return fallback


def _config_block(cfg: dict, rows: dict[str, dict] | None, doc_ids: list[str]) -> dict[str, Any]:
    drop = cfg.get("drop") or {}
    acc = cfg.get("accuracy") or {}
    block: dict[str, Any] = {
        "id": cfg.get("label") or cfg["config_id"], "kind": cfg["kind"], "k": cfg.get("k"), "seed": cfg.get("seed"),
        "mode": cfg.get("mode"), "heads": cfg.get("heads") or [], "heads_label": cfg.get("heads_label"),
        "acc": acc.get("mean"), "acc_ci": [acc.get("ci_low"), acc.get("ci_high")],
        "drop": drop.get("drop"), "drop_ci": [drop.get("ci_low"), drop.get("ci_high")],
        "p": (cfg.get("test") or {}).get("pvalue"), "n": acc.get("n"),
    }
    if rows is None:
        block["missing"] = True
        return block
    score, status, box, raw = [], [], [], []
    for doc in doc_ids:
        row = rows.get(doc)
        if row is None:  # a doc this configuration did not score
            score.append(None)
            status.append("")
            box.append(None)
            raw.append("")
            continue
        record = row["record"]
        score.append(_score(record, None))
        status.append(STATUS_CODES.get(record.get("status", ""), ""))
        pred = record.get("pred_box")
        box.append(_round(pred) if isinstance(pred, list) and len(pred) == 4 else None)
        raw.append(row["raw"][:300])
    block |= {"score": score, "status": "".join(s or "-" for s in status), "box": box, "raw": raw}
    return block


def group_block(group: dict, roots: Sequence[Path], index: int) -> tuple[dict[str, Any], list[str]]:
    """One model x task: its docs (from the baseline's sample file, or the first configuration's in a group that has
    no baseline run), every configuration's outcomes per doc, and the report's k-curve rows; the notes name sample
    files that could not be found."""
    notes: list[str] = []
    cfgs = [c for c in (group.get("baseline"), *group["configs"]) if c]
    base_cfg = cfgs[0] if cfgs else {}
    base_path = resolve(base_cfg.get("samples"), roots)
    base_rows = _sample_rows(base_path) if base_path else {}
    if base_path is None:
        whose = "the baseline's" if base_cfg is group.get("baseline") else "its"
        notes.append(f"{group['model']} / {group['task']}: {whose} sample file {base_cfg.get('samples')} is "
                     f"not here; the docs are left out")
    doc_ids = sorted(base_rows, key=lambda d: (0, int(d)) if d.lstrip("-").isdigit() else (1, d))
    docs = {"id": doc_ids, "expr": [], "image_id": [], "gt": [], "size": [], "task": group["task"]}
    for d in doc_ids:
        record, doc = base_rows[d]["record"], base_rows[d]["doc"]
        docs["expr"].append(str(record.get("expression") or doc.get("expression") or doc.get("question") or ""))
        docs["image_id"].append(str(record.get("image_id") or doc.get("image_id") or ""))
        gt = record.get("gt_box")
        docs["gt"].append(_round(gt) if isinstance(gt, list) and len(gt) == 4 else None)
        size = record.get("image_size")
        docs["size"].append([int(v) for v in size] if isinstance(size, list) and len(size) == 2 else None)
    configs, missing = [], []
    for cfg in cfgs:
        path = resolve(cfg.get("samples"), roots) if cfg is not base_cfg else base_path
        rows = base_rows if cfg is base_cfg else (_sample_rows(path) if path else None)
        if path is None and cfg is not base_cfg:
            missing.append(str(cfg.get("label")))
        configs.append(_config_block(cfg, rows, doc_ids))
    if missing and base_path is not None:
        notes.append(f"{group['model']} / {group['task']}: the sample files of {len(missing)} configuration(s) are "
                     f"not here ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}); their answers are "
                     f"left out")
    heads_file = next((c["heads_file"] for c in group["configs"] if c.get("heads_file")), None) or {}
    block = {"id": f"g{index}", "model": group["model"], "task": group["task"], "kind": group.get("kind"),
             "metric": group.get("metric"), "docs": docs, "configs": configs, "summary": group.get("summary") or [],
             "dead_heads": group.get("dead_heads") or [], "heads_file": heads_file.get("sha256")}
    return block, notes


def heads_block(path: Path, label: str) -> dict[str, Any]:
    """Every scoring cell of a heads file (scores layers x heads, ranking), its primary cell first."""
    hf = load_heads_file(path)
    primary = hf.scoring.get("cell") if isinstance(hf.scoring.get("cell"), str) else None
    cells = {}
    for name, cell in (hf.cells or {}).items():
        scores = np.asarray(cell.get("scores"), dtype=float)
        if scores.shape != np.asarray(hf.scores).shape:
            continue
        ranking = [str(h) for h in cell.get("ranking") or []]
        cells[name] = {"scores": np.round(scores, 6).tolist(), "ranking": ranking}
    name = primary or "scores"
    cells = {name: {"scores": np.round(np.asarray(hf.scores, dtype=float), 6).tolist(),
                    "ranking": [str(h) for h in hf.ranking]}} | {k: v for k, v in cells.items() if k != name}
    dead = (hf.extra.get("dead_heads") or {}).get("heads") if isinstance(hf.extra.get("dead_heads"), dict) else None
    return {"label": label, "path": shown_path(path), "model": shown_model(str(hf.model.get("id", ""))),
            "sha256": hf.sha256, "layers": hf.geometry.layers, "heads": hf.geometry.heads, "primary": name,
            "cells": cells, "dead": [str(h) for h in dead or []]}


def _quantised(grids: np.ndarray) -> tuple[str, list[float]]:
    """(layers, heads, rows, cols) -> base64 of uint8 cells, each head's map scaled to its own maximum, and the
    maxima (so the page can show a cell's attention as a number)."""
    flat = np.nan_to_num(grids.astype(np.float32)).reshape(grids.shape[0] * grids.shape[1], -1)
    top = flat.max(axis=1)
    scaled = np.where(top[:, None] > 0, flat / np.where(top > 0, top, 1)[:, None], 0.0)
    data = np.clip(np.rint(scaled * 255), 0, 255).astype(np.uint8)
    return base64.b64encode(data.tobytes()).decode("ascii"), [float(f"{v:.4g}") for v in top]


def doc_views_block(folders: Sequence[Path], max_side: int = 160) -> dict[str, Any]:
    """Thumbnails (data URIs) and per-head sample maps from the first `doc_views/` folder that exists."""
    for folder in folders:
        if (folder / MAPS_JSON).is_file() or (folder / "images").is_dir():
            break
    else:
        return {"images": {}, "maps": None}
    images = {}
    for png in sorted((folder / "images").glob("*.png")) if (folder / "images").is_dir() else []:
        data = png.read_bytes()
        if data[:8] == b"\x89PNG\r\n\x1a\n":
            images[png.stem] = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    maps = None
    if (folder / MAPS_JSON).is_file() and (folder / MAPS_NPZ).is_file():
        meta = json.loads((folder / MAPS_JSON).read_text(encoding="utf-8"))
        with np.load(folder / MAPS_NPZ, allow_pickle=False) as npz:
            docs = []
            for entry in meta.get("docs") or []:
                key = str(entry["key"])
                if key not in npz.files:
                    raise VRHError(f"{folder / MAPS_NPZ} has no maps of {key}; capture the doc views again")
                grids = npz[key]
                data, scale = _quantised(grids)
                grid = entry["grid"]
                docs.append({"key": key, "doc_id": str(entry["doc_id"]), "task": entry["task"],
                             "expression": str(entry.get("expression", "")), "answer": str(entry.get("answer", "")),
                             "gt_box": _round(entry.get("gt_box")), "pred_box": _round(entry.get("pred_box")),
                             "correct": entry.get("correct"), "rows": grid["rows"], "cols": grid["cols"],
                             "x_edges": grid["x_edges"], "y_edges": grid["y_edges"],
                             "image_size": grid["image_size"], "layers": int(grids.shape[0]),
                             "heads": int(grids.shape[1]), "cells": data, "scale": scale})
        maps = {"model": shown_model(str(meta.get("model", ""))), "rows": meta.get("rows"), "docs": docs}
    return {"images": images, "maps": maps, "folder": shown_path(folder)}


def _views_mismatch(views: dict[str, Any], groups: list[dict[str, Any]]) -> str | None:
    """Where the saved sample maps name a doc of a shown task with another expression (doc views of another scene
    set or run): that doc, else None."""
    for doc in (views.get("maps") or {}).get("docs") or []:
        for group in groups:
            docs = group["docs"]
            if docs["task"] != doc["task"] or doc["doc_id"] not in docs["id"]:
                continue
            shown = docs["expr"][docs["id"].index(doc["doc_id"])]
            if shown != doc["expression"]:
                return f"{doc['task']} doc {doc['doc_id']}: {doc['expression']!r}, the run's {shown!r}"
    return None


def explorer_data(report: dict, roots: Sequence[Path], heads_paths: Sequence[Path], doc_view_dirs: Sequence[Path],
                  title: str) -> dict[str, Any]:
    """The page's data: groups (each a run side: a model x task), heads files, doc views and notes."""
    notes: list[str] = []
    groups = []
    for i, g in enumerate(report.get("groups") or []):
        block, found = group_block(g, roots, i)
        groups.append(block)
        notes += found
    heads = []
    seen: set[str] = set()
    for path in heads_paths:
        block = heads_block(path, Path(path).stem if Path(path).stem != "heads" else shown_path(path))
        if block["sha256"] in seen:
            continue
        seen.add(block["sha256"])
        heads.append(block)
    views = doc_views_block(doc_view_dirs)
    mismatch = _views_mismatch(views, groups)
    if mismatch:
        notes.append(f"the doc views in {views.get('folder')} are of other docs ({mismatch}); left out")
        views = {"images": {}, "maps": None}
    return {"schema": "vrh-explorer/1", "title": title, "created": report.get("created"),
            "version": report.get("version"), "groups": groups, "heads_files": heads,
            "filters_rule": "broken: score below the baseline's; a control breaks a doc when at least half of its "
                            "draws do",
            "doc_views": views, "notes": notes + list(report.get("warnings") or [])}
