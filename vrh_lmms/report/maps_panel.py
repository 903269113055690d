"""The report's panel for `vrh-lmms attention-maps` and `vrh-lmms locate` folders given to `vrh-lmms report`: each
doc's attention-map PNG (copied into plots/) with its boxes, and the locator's Acc@0.5 table. Read from the folders'
JSON files only (vrh_lmms.runs.maps writes them); the rest of the report is untouched."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.escape import md, md_code
from vrh_lmms.base.heads.kinds import KINDS
from vrh_lmms.base.paths import shown_model, shown_path
from vrh_lmms.report.plots import slug

MAPS_FILE = "attention_maps.json"
LOCATE_FILE = "locate.json"


def is_maps_folder(folder: str | Path) -> bool:
    """A folder written by attention-maps or locate (its result file at the top)."""
    root = Path(folder)
    return (root / MAPS_FILE).is_file() or (root / LOCATE_FILE).is_file()


def _read(path: Path, prefix: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise VRHError(f"{path}: not readable as JSON ({exc})") from None
    if not str(data.get("schema", "")).startswith(prefix):
        raise VRHError(f"{path}: not written by vrh-lmms ({prefix}* schema expected)")
    return data


def maps_block(folders: list[str | Path], out: Path) -> dict[str, Any] | None:
    """Copy each doc's PNG into out/plots and collect what the panel shows; None without such folders."""
    block: dict[str, Any] = {"maps": [], "locate": []}
    for i, raw in enumerate(folders):
        root = Path(raw)
        if (root / MAPS_FILE).is_file():
            data = _read(root / MAPS_FILE, "vrh-attention-maps/")
            for doc in data["docs"]:
                source = (root / str(doc["png"])).resolve()
                if not source.is_relative_to(root.resolve()) or source.suffix != ".png":
                    raise VRHError(f"{root / MAPS_FILE}: doc {doc.get('doc_id')!r} names a picture outside its "
                                   f"folder or not a PNG; the report copies only the folder's own PNGs")
                name = f"plots/maps_{i}_{slug(source.stem)}.png"  # a name a run gave never becomes a path
                (out / "plots").mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, out / name)
                block["maps"].append({"source": shown_path(root), "model": shown_model(data["model"]), "k": data["k"],
                                      "rows": data["rows"], "doc_id": doc["doc_id"], "task": doc["task"],
                                      "expression": doc["expression"], "answer": doc["answer"],
                                      "gt_box": doc["gt_box"], "pred_box": doc["pred_box"],
                                      "located_box": doc["located_box"], "png": name})
        if (root / LOCATE_FILE).is_file():
            data = _read(root / LOCATE_FILE, "vrh-locate/")
            block["locate"].append({"source": shown_path(root), "model": shown_model(data["model"]),
                                    "tasks": data["tasks"],
                                    "n_docs": data["n_docs"], "clustered_by": data["clustered_by"],
                                    "locator": data["locator"], "query_rows": data["query_rows"],
                                    "rows": data["rows"]})
    return block if block["maps"] or block["locate"] else None


def _ci(d: dict[str, Any]) -> str:
    return f"{100 * d['mean']:.1f} [{100 * d['ci_low']:.1f}, {100 * d['ci_high']:.1f}]"


def _diff(d: dict[str, Any]) -> str:
    return f"{100 * d['diff']:+.1f} [{100 * d['ci_low']:+.1f}, {100 * d['ci_high']:+.1f}]"


def maps_markdown(block: dict[str, Any] | None) -> str:
    """The panel's markdown (empty without a block)."""
    if not block:
        return ""
    out = ["", "## Attention maps over the image and the locator", ""]
    for entry in block["locate"]:
        loc = entry["locator"]
        controls = [k for k in KINDS if k.control and entry["rows"] and k.name in entry["rows"][0]]
        out += [f"Locator on {md(shown_model(entry['model']))} / {', '.join(md(t) for t in entry['tasks'])}: "
                f"{entry['n_docs']} docs, Gaussian sigma {md(loc['sigma'])} cells, threshold {md(loc['threshold'])}; "
                f"Acc@0.5 in % with 95% intervals clustered by {md(entry['clustered_by'])} "
                f"({md_code(shown_path(entry['source']))}).", "",
                "| k | answer | top-k located | top-k - answer | "
                + "".join(f"{c.dashed} located (draws, each) | top-k - {c.dashed} | " for c in controls).rstrip(),
                "|---|---|---|---|" + "---|---|" * len(controls)]
        for row in entry["rows"]:
            cells = [str(row["k"]), _ci(row["answer"]), _ci(row["topk"]), _diff(row["topk_minus_answer"])]
            for kind in controls:
                c = row[kind.name]
                spread = f"{100 * min(c['per_seed']):.0f}-{100 * max(c['per_seed']):.0f}" if c["draws"] else ""
                cells += ([f"{_ci(c)} ({c['draws']}, each {spread})", _diff(c["topk_minus"])] if c["draws"]
                          else ["unavailable", ""])
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    for m in block["maps"]:
        out += [f"**{md(m['task'])} doc {md(m['doc_id'])}** (\"{md(m['expression'])}\" -> {md_code(m['answer'])}; "
                f"{md(m['rows'])} rows, top-{m['k']}): GT {md(m['gt_box'])}, predicted {md(m['pred_box'])}, located "
                f"{md(m['located_box'])}", "",
                f"![attention maps, doc {md(m['doc_id'])}]({m['png']})", ""]
    return "\n".join(out)
