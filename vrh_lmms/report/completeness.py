"""Whether the sweeps given to `vrh-lmms report` finished: a report of an interrupted or mixed sweep folder must say
so (or be refused), not present 3 of 11 configurations as the whole sweep.

A sweep's manifest (sweep.json, vrh_lmms.runs.sweep.run) lists every configuration with its status; a configuration is
*pending* when the manifest says so or its results.json is missing, and the folder is *mixed* when configs/ holds
results of configurations the manifest does not list (another sweep's). A folder whose sweep.json cannot be read is
unfinished too (what it ran is unknown); one whose configs/ holds results beside no manifest at all (a hand-made
folder, or one whose manifest was removed) is neither: whether it finished is unknown, and the report says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vrh_lmms.base import owned
from vrh_lmms.base.errors import VRHError


def _manifests(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("sweep.json") if p.is_file()) if root.is_dir() else []


# the manifests of the other commands whose folders hold configs/<id>/results.json (vrh-lmms steer)
OTHER_MANIFESTS = ("steer.json",)


def sweep_status(manifest: Path) -> dict[str, Any] | None:
    """{"folder", "pending": [ids], "unlisted": [ids]} of one sweep manifest, with "unreadable" (why) where it
    cannot be read; None when it is a JSON object that lists no statuses (an earlier version's manifest)."""
    folder = manifest.parent
    problem = owned.json_problem(manifest)
    if problem is not None:
        return {"folder": str(folder), "pending": [], "unlisted": [], "unreadable": problem}
    configs = json.loads(manifest.read_text(encoding="utf-8")).get("configurations")
    if not isinstance(configs, list):
        return None
    listed = [c for c in configs if isinstance(c, dict) and "id" in c]
    pending = [str(c["id"]) for c in listed if c.get("status") != "unavailable"
               and (c.get("status") != "done" or not (folder / "configs" / str(c["id"]) / "results.json").is_file())]
    ids = {str(c["id"]) for c in listed}
    done_dirs = sorted(p.parent.name for p in (folder / "configs").glob("*/results.json"))
    return {"folder": str(folder), "pending": pending, "unlisted": [d for d in done_dirs if d not in ids]}


def incomplete_sweeps(dirs: list[str | Path]) -> list[dict[str, Any]]:
    """The sweeps under `dirs` with pending or unlisted configurations, or whose manifest cannot be read."""
    found = []
    for d in dirs:
        for manifest in _manifests(Path(d)):
            status = sweep_status(manifest)
            if status and (status["pending"] or status["unlisted"] or status.get("unreadable")):
                found.append(status)
    return found


def unknown_sweeps(dirs: list[str | Path]) -> list[str]:
    """Folders under `dirs` whose configs/ holds results beside no manifest: whether their sweep finished is
    unknown."""
    out = []
    for d in dirs:
        root = Path(d)
        configs = sorted(p for p in root.rglob("configs") if p.is_dir()) if root.is_dir() else []
        for folder in (c.parent for c in configs):
            if any((folder / "configs").glob("*/results.json")) and not any(
                    (folder / name).exists() for name in ("sweep.json", *OTHER_MANIFESTS)):
                out.append(str(folder))
    return out


def unknown_note(folder: str) -> str:
    """The report's warning about a sweep folder without its manifest."""
    return (f"{folder}: no sweep.json beside its configs/, so whether its sweep finished is unknown (report.json "
            f"complete: null)")


def _ids(ids: list[str], limit: int = 4) -> str:
    return ", ".join(ids[:limit]) + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def describe(status: dict[str, Any]) -> str:
    if status.get("unreadable"):
        return f"{status['folder']}: its sweep.json cannot be read ({status['unreadable']}), so what it ran is unknown"
    parts = []
    if status["pending"]:
        parts.append(f"{len(status['pending'])} configuration(s) pending ({_ids(status['pending'])})")
    if status["unlisted"]:
        parts.append(f"results of {len(status['unlisted'])} configuration(s) its sweep.json does not list "
                     f"({_ids(status['unlisted'])}: another sweep's)")
    return f"{status['folder']}: " + " and ".join(parts)


def check_complete(dirs: list[str | Path], allow_incomplete: bool) -> list[dict[str, Any]]:
    """Refuse (one line) sweeps with pending or mixed configurations unless `allow_incomplete`; returns them."""
    found = incomplete_sweeps(dirs)
    if found and not allow_incomplete:
        more = f" (and {len(found) - 1} more folder(s))" if len(found) > 1 else ""
        raise VRHError(f"unfinished sweep: {describe(found[0])}{more}; rerun the sweep to finish it (it resumes), or "
                       f"pass --allow-incomplete to report what is there")
    return found


def pending_record(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """report.json's `pending`: per unfinished sweep folder, its pending and unlisted configuration ids."""
    return [{"folder": s["folder"], "configurations": s["pending"], "unlisted": s["unlisted"]}
            | ({"unreadable": s["unreadable"]} if s.get("unreadable") else {}) for s in found]


def warning_line(found: list[dict[str, Any]]) -> str:
    """report.md's first line when it covers unfinished sweeps (counts only: the names are in report.json)."""
    pending = sum(len(s["pending"]) for s in found)
    unlisted = sum(len(s["unlisted"]) for s in found)
    unreadable = sum(bool(s.get("unreadable")) for s in found)
    what = [f"{pending} configuration(s) pending"] if pending else []
    what += [f"{unlisted} configuration(s) from another sweep"] if unlisted else []
    what += [f"{unreadable} sweep.json that cannot be read"] if unreadable else []
    return (f"**Incomplete:** {len(found)} sweep folder(s) given to this report did not finish ({' and '.join(what)}"
            f"; report.json `pending` names them), so its figures are not those of the whole sweep.")
