"""The report's panel for `vrh-lmms attention-maps` and `vrh-lmms locate` folders given to `vrh-lmms report`: each
doc's attention-map PNG (copied into plots/) with its boxes, and the locator's Acc@0.5 table. Read from the folders'
JSON files only (vrh_lmms.runs.maps writes them); the rest of the report is untouched."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from vrh_lmms.base.errors import VRHError

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
                name = f"plots/maps_{i}_{Path(doc['png']).name}"
                (out / "plots").mkdir(parents=True, exist_ok=True)
                shutil.copyfile(root / doc["png"], out / name)
                block["maps"].append({"source": str(root), "model": data["model"], "k": data["k"],
                                      "rows": data["rows"], "doc_id": doc["doc_id"], "task": doc["task"],
                                      "expression": doc["expression"], "answer": doc["answer"],
                                      "gt_box": doc["gt_box"], "pred_box": doc["pred_box"],
                                      "located_box": doc["located_box"], "png": name})
        if (root / LOCATE_FILE).is_file():
            data = _read(root / LOCATE_FILE, "vrh-locate/")
            block["locate"].append({"source": str(root), "model": data["model"], "tasks": data["tasks"],
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
        out += [f"Locator on {entry['model']} / {', '.join(entry['tasks'])}: {entry['n_docs']} docs, Gaussian sigma "
                f"{loc['sigma']} cells, threshold {loc['threshold']}; Acc@0.5 in % with 95% intervals clustered by "
                f"{entry['clustered_by']} (`{entry['source']}`).", "",
                "| k | answer | top-k located | top-k - answer | random located (draws, each) | top-k - random | "
                "layer-matched located (draws, each) | top-k - layer-matched |", "|---|---|---|---|---|---|---|---|"]
        for row in entry["rows"]:
            cells = [str(row["k"]), _ci(row["answer"]), _ci(row["topk"]), _diff(row["topk_minus_answer"])]
            for kind in ("random", "layer_matched"):
                c = row[kind]
                spread = f"{100 * min(c['per_seed']):.0f}-{100 * max(c['per_seed']):.0f}" if c["draws"] else ""
                cells += ([f"{_ci(c)} ({c['draws']}, each {spread})", _diff(c["topk_minus"])] if c["draws"]
                          else ["unavailable", ""])
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    for m in block["maps"]:
        out += [f"**{m['task']} doc {m['doc_id']}** (\"{m['expression']}\" -> `{m['answer']}`; {m['rows']} rows, "
                f"top-{m['k']}): GT {m['gt_box']}, predicted {m['pred_box']}, located {m['located_box']}", "",
                f"![attention maps, doc {m['doc_id']}]({m['png']})", ""]
    return "\n".join(out)
