"""A toy resumable command on the runner (vrh_lmms.runs.runner), for tests/unit/test_runner.py: three units, each
one JSON file under `units/`, written through the runner's atomic publisher; a "model" that records its loads.

Run as a script (`python -m support.toy_job OUT [KILL_AT]`) it runs the job in its own process and, with KILL_AT,
kills itself with SIGKILL half way through writing that unit, as a crash or an out-of-memory kill would.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from vrh_lmms.base import atomic, owned
from vrh_lmms.runs.runner import Job, Manifest, Runner, is_published_file

UNITS = ["u1", "u2", "u3"]
LAYOUT: owned.Layout = {"toy.json": owned.json_with("identity"), ".toy.json.*": owned.is_file,
                        "units": owned.files_matching("*.json", ".*.json.*")}


def toy_job(out: Path, seed: int = 0, units: list[str] | None = None) -> Job:
    return Job(out=out, layout=LAYOUT, manifest=Manifest(out / "toy.json"), identity={"model": "toy", "seed": seed},
               units=list(units or UNITS), units_dir=out / "units", entry=lambda uid: f"{uid}.json",
               complete=is_published_file, what="toy run", unit="unit", fields=lambda: {"note": "fields first"})


def run_toy(out: Path, seed: int = 0, force: bool = False, kill_at: str | None = None,
            loads: list[str] | None = None, ran: list[str] | None = None) -> Runner:
    """Claim `out`, run every pending unit with a lazily loaded model; `loads` and `ran` record what happened."""
    loads = [] if loads is None else loads
    ran = [] if ran is None else ran
    runner = Runner(toy_job(out, seed), force)
    runner.inspect()
    runner.claim()

    def load() -> dict[str, Any]:
        loads.append("model")
        return {"weight": 2}

    def run_unit(uid: str) -> None:
        model = runner.model(load)
        ran.append(uid)
        target = runner.job.unit_path(uid)
        with atomic.atomic_file(target) as tmp:
            with open(tmp, "w") as f:
                f.write('{"unit": "%s", ' % uid)
                f.flush()
                if uid == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)  # half a file written, as a killed process leaves it
                f.write('"value": %d}' % (model["weight"] * int(uid[1:])))

    runner.run(run_unit)
    return runner


if __name__ == "__main__":
    run_toy(Path(sys.argv[1]), kill_at=sys.argv[2] if len(sys.argv) > 2 else None)
    print(json.dumps("finished"))
