"""Output folders of `vrh-lmms steer` and `vrh-lmms patch`: resumed when they hold the same run, refused otherwise.

A manifest (JSON) records what was asked; a rerun with the same identity keeps every finished piece (a piece is
finished when its file or folder exists: all are written to a temporary name and renamed), a different identity is
refused unless `force`, which discards the folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from vrh_lmms.errors import VRHError


def file_sha256(path: str | Path | None) -> str | None:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else None


def open_folder(out: Path, manifest: str, identity: dict[str, Any], force: bool) -> dict[str, Any] | None:
    """Check `out` before a run; returns the old manifest when the same run is resumed."""
    path = out / manifest
    if path.is_file():
        old = json.loads(path.read_text())
        differs = [k for k, v in identity.items() if old.get("identity", {}).get(k) != v]
        if not differs:
            return old
        if not force:
            raise VRHError(f"{out} holds a different run ({', '.join(differs)} differ); choose another --output or "
                           f"pass --force to discard it")
        shutil.rmtree(out)
    elif out.exists() and any(out.iterdir()):
        if not force:
            raise VRHError(f"{out} is not empty and holds no {manifest}; choose another --output or pass --force")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    return None


def write_json(path: Path, data: Any) -> Path:
    """Atomic JSON write (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)
    return path
