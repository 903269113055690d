"""What `vrh-lmms steer` and `vrh-lmms patch` leave in their folders: file names, layouts (what --force may remove),
the steering configurations and the reader of their records. The runs that write these folders
(`steer_run`, `patch_run`) and the report that reads them (`vrh_lmms.report.interventions`) both import them from
here, so neither imports the other for them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vrh_lmms.base import owned
from vrh_lmms.base.console import LOG_NAME
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.kinds import DEFAULT_POOL
from vrh_lmms.base.runfile import RUN_FILE
from vrh_lmms.runs.interventions.folder import beside, temporaries
from vrh_lmms.runs.runner import CONFIG_ENTRY

STEER_MANIFEST = "steer.json"
_STEER_MANIFEST_FILE = owned.json_with("identity", "configurations")
# What `vrh-lmms steer` writes into its folder (what --force may remove).
STEER_LAYOUT: dict[str, owned.Check | None] = {
    STEER_MANIFEST: _STEER_MANIFEST_FILE,
    "configs": owned.folder_of({"*": CONFIG_ENTRY}),
    "summary.json": owned.json_with("configs", "table"),
    "report.md": beside(STEER_MANIFEST, _STEER_MANIFEST_FILE),
    RUN_FILE: beside(STEER_MANIFEST, _STEER_MANIFEST_FILE),  # the run file (vrh_lmms.base.runfile)
    LOG_NAME: owned.log_file,  # the libraries' output (vrh_lmms.base.console)
    **temporaries(STEER_MANIFEST, "summary.json", "report.md", RUN_FILE),
}

PATCH_MANIFEST = "patch_run.json"
PATCH_RESULT = "patch.json"
PATCH_SCHEMA = "vrh-patch/2"  # 2: "effect" + "measure" (recovery or destroyed, by direction) replace "recovery"
_PATCH_MANIFEST_FILE = owned.json_with("identity")
# What `vrh-lmms patch` writes into its folder (what --force may remove).
PATCH_LAYOUT: dict[str, owned.Check | None] = {
    PATCH_MANIFEST: _PATCH_MANIFEST_FILE,
    PATCH_RESULT: owned.json_with("schema", schema_prefix="vrh-patch/"),
    "inputs": owned.files_matching("*.pt"),  # atomic temporaries are `.<name>.pt.*.pt`
    "parts": owned.files_matching("*.json", ".*.json.*"),
    "eval": owned.RUN_FOLDER,
    ".eval.*": owned.RUN_FOLDER,  # write_run's staging folder
    "report.md": beside(PATCH_MANIFEST, _PATCH_MANIFEST_FILE),
    "patch_map.png": beside(PATCH_MANIFEST, _PATCH_MANIFEST_FILE),
    RUN_FILE: beside(PATCH_MANIFEST, _PATCH_MANIFEST_FILE),  # the run file (vrh_lmms.base.runfile)
    LOG_NAME: owned.log_file,  # the libraries' output (vrh_lmms.base.console)
    **temporaries(PATCH_MANIFEST, PATCH_RESULT, "report.md", "patch_map.png", RUN_FILE),
}


@dataclass(frozen=True)
class SteerConfig:
    id: str
    kind: str  # a configuration kind of vrh_lmms.base.heads.kinds
    k: int
    seed: int | None
    spec: str
    bias: float
    pool: str = DEFAULT_POOL  # what a control's heads are drawn from; the manifest records it once (control_pool)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("pool")
        return out



def read_steer_records(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """config id -> `vrh_steer` records of its sample lines (with task, doc_id, image_id, correct, status)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for cfg_dir in sorted((folder / "configs").iterdir()):
        if not (cfg_dir / "results.json").is_file():
            continue
        rows = []
        for path in sorted(cfg_dir.glob("samples_*.jsonl")):
            task = path.stem[len("samples_"):]
            with open(path) as f:
                for line in f:
                    row = json.loads(line)
                    rec, steer = row.get("vrh_record") or {}, row.get("vrh_steer")
                    if steer is None:
                        raise VRHError(f"{path}: sample line without vrh_steer; not a `vrh-lmms steer` folder")
                    rows.append({**steer, "task": task, "doc_id": int(row["doc_id"]),
                                 "image_id": str(rec.get("image_id", "")), "correct": bool(rec.get("correct")),
                                 "status": rec.get("status")})
        out[cfg_dir.name] = rows
    return out


def manifest_configs(folder: Path) -> list[SteerConfig]:
    data = json.loads((folder / STEER_MANIFEST).read_text())
    keys = {f for f in SteerConfig.__dataclass_fields__}
    return [SteerConfig(**{k: v for k, v in c.items() if k in keys}) for c in data["configurations"]]
