"""The one resumable run: every command that writes a run folder and may be rerun into it goes through here
(sweep, steer, patch, discovery's parts folder, replicate's stages).

A command declares a `Job`: its output folder and layout (what it writes there, so what --force may remove), where
its identity is recorded (`Manifest`), the identity itself (what must match to resume), and its units (sweep or
steering configurations, patched pairs, discovery's docs, replicate's stages): one entry each in a units folder,
finished when its published file exists (or recorded done in the manifest, where a unit has no file of its own).
The runner owns the rest:

- inspect (before anything is written or loaded): a missing or empty folder is fresh; a folder holding anything the
  command did not write is refused, even with --force; the same identity resumes; another identity is refused in
  one line naming the fields that differ, unless --force (which then removes exactly the layout's files), or unless
  the job allows replacing a run that finished no unit (a sweep that failed early never blocks).
- claim (rank 0, after every check has passed): apply that decision, create the folder, clear what killed units
  left (their `.name.*` temporaries, unit folders without their finished file), write the manifest; every rank
  gets the same finished units.
- the manifest, one writer: the identity first, the job's fields, every unit with its status (done, pending or
  unavailable with the reason), the job's extra fields.
- units: finished ones are skipped; a unit publishes its files under a temporary name renamed at the end
  (vrh_lmms.base.atomic; lmms.write_run stages whole folders the same way), so a killed run never leaves a unit that
  looks finished, and the manifest is rewritten after each.
- the model: loaded once, on the first pending unit, never when every unit is done.

A command that writes one result into its folder (attention-maps, locate, rank, kv-cache) is a job of one unit
(`result_job`): its identity is `identity.json`, written when the folder is claimed, and its result file is
published last; the same arguments into a finished folder do nothing (no model load) unless --force, which runs it
again; a run killed before its result is redone from scratch by the same arguments, and replaced by other ones
without --force (nothing finished is lost). A folder an earlier version left (a result, no identity.json) is
refused unless --force, which replaces it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vrh_lmms.base import atomic, console, owned, runfile
from vrh_lmms.base.console import LOG_NAME
from vrh_lmms.base.errors import VRHError
from vrh_lmms.harness import distributed


# ------------------------------------------------------------------------------------------------ the manifest
@dataclass(frozen=True)
class Manifest:
    """The file that records a run's identity under `key`: `{"identity": {...}, ...}` (sweep.json, steer.json,
    patch_run.json; replicate.json's is `spec`), or, with `key=None`, a file that is the identity itself
    (discovery's `<heads>.parts/identity.json`)."""

    path: Path
    key: str | None = "identity"

    def read(self) -> dict[str, Any] | None:
        """The whole file, or None where there is none."""
        if not self.path.is_file():
            return None
        data = json.loads(self.path.read_text())
        return data if isinstance(data, dict) else {}

    def damage(self) -> str:
        """Why the file at `path`, which the command's layout does not recognise, cannot be read as its manifest."""
        return owned.json_problem(self.path) or "a JSON object without this command's fields"

    def identity(self) -> dict[str, Any] | None:
        """The identity recorded there (None where there is no manifest)."""
        data = self.read()
        if data is None or self.key is None:
            return data
        return data.get(self.key) or {}

    def write(self, identity: Mapping[str, Any], fields: Mapping[str, Any] | None = None) -> Path:
        """The one manifest writer: the identity first, then `fields` in their order."""
        data = dict(identity) if self.key is None else {self.key: dict(identity), **(fields or {})}
        return atomic.write_json(self.path, data)


def differing(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The identity fields whose values differ, a field present on one side only included."""
    return [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def unit_status(uid: str, done: Iterable[str], unavailable: Mapping[str, str]) -> dict[str, str]:
    """A unit's manifest status: done, pending, or unavailable with the reason (a control that cannot be drawn from
    its pool)."""
    if uid in unavailable:
        return {"status": "unavailable", "reason": unavailable[uid]}
    return {"status": "done" if uid in done else "pending"}


# ------------------------------------------------------------------------------------------------ the folder
@dataclass
class Decision:
    """What `claim_folder` will do with `out`: resume the same run, or remove our files of another run first."""

    out: Path
    resume: bool
    clear: bool
    damaged: Path | None = None  # a manifest that cannot be read, removed with the run's files


def inspect_folder(out: Path, layout: owned.Layout, manifest: Manifest, identity: Mapping[str, Any], force: bool, *,
                   what: str = "run", finished: Callable[[], int] | None = None, unit: str = "unit",
                   option: str = "--output", resume_without_manifest: bool = False) -> Decision:
    """Decide about `out` without changing it; refusals are raised here, in one line (see the module doc).
    `finished` counts the finished units of the run found there: given, a run that finished none is replaced without
    --force, and the refusal says how many would be lost. `resume_without_manifest`: a folder of ours without a
    manifest (left by an earlier version that wrote it only after its first unit) is resumed."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise VRHError(f"{option} {out} exists and is not a folder; choose another {option}")
    if not out.exists() or not any(out.iterdir()):
        return Decision(out, resume=False, clear=False)
    foreign = owned.foreign_entries(out, layout)
    damaged = manifest.path in foreign and owned.is_file(manifest.path)
    # a damaged manifest is the command's by its name (the rest of the folder must be ours): refused naming it,
    # discarded by --force with the run's other files
    owned.refuse_foreign(out, [p for p in foreign if not (damaged and p == manifest.path)], option)
    if damaged:
        if force:
            return Decision(out, resume=False, clear=True, damaged=manifest.path)
        raise VRHError(f"{out} holds a {what} whose {manifest.path.name} cannot be read ({manifest.damage()}), so "
                       f"what it ran is unknown; choose another {option} or pass --force to discard it")
    old = manifest.identity()
    if old is None and resume_without_manifest:
        return Decision(out, resume=True, clear=False)
    differs = differing(old, identity) if old is not None else None
    if differs == []:
        return Decision(out, resume=True, clear=False)
    count = finished() if finished is not None else None
    if count == 0 or force:
        return Decision(out, resume=False, clear=True)
    why = f"{', '.join(differs)} differ" if differs else f"no {manifest.path.name}: an earlier version's"
    lost = f" with {count} finished {unit}(s)" if count is not None else ""
    raise VRHError(f"{out} holds a different {what} ({why}){lost}; choose another {option} "
                   f"or pass --force to discard {'them' if count else 'it'}")


def claim_folder(decision: Decision, layout: owned.Layout) -> None:
    """Apply `inspect_folder`'s decision: remove our files of an unresumable run (nothing else), create the folder."""
    if decision.clear:
        for path in owned.owned_entries(decision.out, layout) + ([decision.damaged] if decision.damaged else []):
            owned.remove(path)
    decision.out.mkdir(parents=True, exist_ok=True)


# ------------------------------------------------------------------------------------------------ the job
# A unit published as an lmms-eval run folder (lmms.write_run: a sweep's or steering's configuration): complete
# (results.json) or left by a killed run (partial files, or write_run's `.<id>.*` staging folder).
CONFIG_ENTRY = owned.files_matching("results.json", "samples_*.jsonl")


def has_results(path: Path) -> bool:
    """A unit published as a run folder (lmms.write_run) is finished when its results.json exists."""
    return (path / "results.json").is_file()


def is_published_file(path: Path) -> bool:
    """A unit published as one file is finished when the file exists (its temporary is `.name.*`)."""
    return path.is_file()


@dataclass
class Job:
    """A resumable command as the runner sees it: where it writes, what must match to resume, and its units."""

    out: Path  # the folder the runner claims
    layout: owned.Layout  # what the command writes into `out` (what --force may remove)
    manifest: Manifest
    identity: dict[str, Any]
    units: list[str] = field(default_factory=list)  # unit ids, in run order (may be extended once claimed)
    units_dir: Path | None = None  # where units are published, one entry each
    entry: Callable[[str], str] = str  # a unit id -> its entry's name in units_dir
    complete: Callable[[Path], bool] = has_results  # whether an entry of units_dir is a finished unit
    what: str = "run"  # in refusals: "holds a different <what>"
    unit: str = "unit"  # in refusals: "with 3 finished <unit>(s)"
    replace_unfinished: bool = False  # a different run that finished no unit is replaced without --force
    units_key: str | None = "configurations"  # where the manifest lists the units (None: it does not)
    describe: Callable[[str], dict[str, Any]] = lambda uid: {"id": uid}  # a unit's manifest entry, before its status
    fields: Callable[[], dict[str, Any]] = dict  # the manifest's fields before the units (heads_file, pack, ...)
    extra: dict[str, Any] = field(default_factory=dict)  # the manifest's fields after the units
    log: Path | None = None  # where the command's library output goes once the folder is claimed
    result: Path | None = None  # a file published last, whose presence says the whole run is finished (patch.json)
    done_in_manifest: Callable[[dict[str, Any]], Iterable[str]] | None = None  # units the manifest records done
    resume_without_manifest: bool = False  # a folder of ours without a manifest resumes (see inspect_folder)

    def unit_path(self, uid: str) -> Path:
        if self.units_dir is None:
            raise VRHError(f"{self.what} declares no units folder")
        return self.units_dir / self.entry(uid)

    def finished_units(self) -> list[str]:
        """Finished entries of the units folder (any run's, whatever this run asks for)."""
        if self.units_dir is None or not self.units_dir.is_dir():
            return []
        return sorted(p.name for p in self.units_dir.iterdir() if not p.name.startswith(".") and self.complete(p))


# ------------------------------------------------------------------------------------------------ one result
IDENTITY = "identity.json"
RESULT_UNIT = "result"


def result_layout(result: owned.Check | None, result_name: str, *written: str) -> owned.Layout:
    """The layout of a one-result folder: identity.json, the result, the log, the run file, and the `written` names
    (glob patterns: figures, tables, a folder of lmms-eval runs), which are ours beside our identity.json or, in an
    earlier version's folder, beside our result; every name's atomic temporary too."""
    identity_ok = owned.json_with("command")
    result_ok = result or owned.is_file

    def beside(path: Path) -> bool:
        return not path.is_symlink() and (identity_ok(path.parent / IDENTITY) or result_ok(path.parent / result_name))

    layout: dict[str, owned.Check | None] = {IDENTITY: identity_ok, result_name: result_ok, LOG_NAME: owned.log_file,
                                             runfile.RUN_FILE: runfile.is_ours}
    layout |= dict.fromkeys(written, beside)
    layout |= {f".{name}.*": owned.is_file for name in (IDENTITY, result_name, runfile.RUN_FILE, *written)}
    return layout


def result_job(out: Path, layout: owned.Layout, result: str, identity: dict[str, Any], what: str) -> Job:
    """A command that writes one result into `out` as a job of one unit (see the module doc); `identity` holds
    `command` and everything the result depends on, `result` is published last."""
    return Job(out=out, layout=layout, manifest=Manifest(out / IDENTITY, key=None), identity=identity,
               units=[RESULT_UNIT], units_key=None, what=what, log=out / LOG_NAME, result=out / result)


class Runner:
    """Runs one `Job`: inspect, claim, manifest, resume, lazy model (see the module doc). Collective calls (`claim`)
    are made by every rank; rank 0 alone changes the folder (vrh_lmms.harness.distributed)."""

    def __init__(self, job: Job, force: bool = False, lm: Any = None):
        self.job, self.force, self.lm = job, force, lm
        self.decision: Decision | None = None
        self.done: set[str] = set()
        self.unavailable: dict[str, str] = {}

    # ---- before anything is written or loaded
    def inspect(self) -> Decision:
        job = self.job
        finished = (lambda: len(job.finished_units())) if job.replace_unfinished else None
        one_result = job.result is not None and job.units_dir is None
        if one_result and not job.result.is_file():
            finished = lambda: 0  # noqa: E731 - a one-result run killed before its result is replaced freely
        self.decision = inspect_folder(job.out, job.layout, job.manifest, job.identity, self.force, what=job.what,
                                       finished=finished, unit=job.unit,
                                       resume_without_manifest=job.resume_without_manifest)
        if one_result and self.decision.resume and (self.force or not job.result.is_file()):
            # its one unit is redone whole: what a killed run left (or, with --force, the finished run) goes first
            self.decision = Decision(job.out, resume=False, clear=True)
        return self.decision

    def complete_note(self) -> str:
        """What a rerun into a finished folder says (it does nothing)."""
        return (f"{self.job.out} already holds this {self.job.what}, finished, with the same settings: nothing to "
                f"do (pass --force to run it again)")

    def recorded(self) -> dict[str, Any] | None:
        """The manifest of the run this one resumes (None when it starts afresh)."""
        return self.job.manifest.read() if self.decision is not None and self.decision.resume else None

    # ---- the folder
    def claim(self) -> set[str]:
        """Take the folder (rank 0: apply the decision, clear leftovers of killed units, write the manifest); returns
        the finished units, the same on every rank."""
        if self.decision is None:
            self.inspect()
        distributed.barrier()  # every rank has checked the folder before rank 0 changes it
        done: set[str] = set()
        if distributed.is_main():
            job = self.job
            claim_folder(self.decision, job.layout)
            if job.log is not None:
                console.log_to(job.log)
            if job.units_dir is not None and job.units:
                job.units_dir.mkdir(parents=True, exist_ok=True)
                done = {u for u in job.units if job.complete(job.unit_path(u))}
                if any(u not in done for u in job.units):
                    self._clear_leftovers()
            if job.done_in_manifest is not None:
                done = set(job.done_in_manifest(self.recorded() or {})) & set(job.units)
            self.done = done
            self.write_manifest()
        self.done = set(distributed.broadcast(done))  # every rank runs the same units, in the same order
        self.decision.clear = False  # applied: what is in the folder now is this run's
        return self.done

    def _clear_leftovers(self) -> None:
        """What killed units left: temporaries (`.name.*`) and entries that are not finished units."""
        for entry in self.job.units_dir.iterdir():
            if entry.name.startswith(".") or not self.job.complete(entry):
                owned.remove(entry)  # ours: the folder passed the job's layout

    def write_manifest(self) -> None:
        """Rank 0: the manifest as it stands (identity, the job's fields, every unit's status)."""
        if not distributed.is_main():
            return
        job = self.job
        fields = dict(job.fields())
        if job.units_key is not None:
            fields[job.units_key] = [dict(job.describe(u), **unit_status(u, self.done, self.unavailable))
                                     for u in job.units]
        job.manifest.write(job.identity, fields | job.extra)

    # ---- units
    @property
    def finished(self) -> bool:
        """Whether the run has nothing left to do: its result is published, or every unit is done (never for a folder
        the inspection decided to clear and that is not claimed yet)."""
        if self.decision is not None and self.decision.clear:
            return False
        if self.job.result is not None:
            return self.job.result.is_file()
        return not self.pending

    @property
    def pending(self) -> list[str]:
        if self.job.result is not None and self.job.result.is_file():
            return []
        return [u for u in self.job.units if u not in self.done and u not in self.unavailable]

    def add_units(self, ids: Iterable[str]) -> None:
        """Units known only once the run has started (patching's pairs come from its evaluation); those already
        published count as done."""
        for uid in ids:
            self.job.units.append(uid)
            if self.job.complete(self.job.unit_path(uid)):
                self.done.add(uid)

    def finish(self, uid: str) -> None:
        """Record a unit whose files are published; a manifest that lists the units says so at once."""
        self.done.add(uid)
        if self.job.units_key is not None or self.job.done_in_manifest is not None:
            self.write_manifest()

    def model(self, load: Callable[[], Any]) -> Any:
        """The model: the one given to the runner, else `load()`'s, called once, when the first pending unit needs it
        (a run whose units are all done never loads one)."""
        if self.lm is None:
            self.lm = load()
        return self.lm

    def run(self, run_unit: Callable[[str], bool | None]) -> None:
        """Run every pending unit in order; `run_unit` publishes the unit's files and returns False where this rank
        wrote nothing (another rank's share), so it is not recorded as done here."""
        for uid in self.pending:
            if run_unit(uid) is not False:
                self.finish(uid)
