"""`vrh-lmms explore RUN`: write (or refresh) the explorer page of a run folder or a report folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from vrh_lmms.base import console
from vrh_lmms.base.errors import VRHError
from vrh_lmms.report.explorer import write_explorer


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN",
                        help="a report folder (holding report.json) or a run folder holding one in report/ "
                             "(vrh-lmms demo, replicate)")
    parser.add_argument("--title", default=None, help="the page's title (default: the models it shows)")


def report_folder(run: Path) -> Path:
    """The folder holding the run's report.json: RUN itself or RUN/report."""
    for folder in (run, run / "report"):
        if (folder / "report.json").is_file():
            return folder
    raise VRHError(f"{run}: no report.json here or in {run / 'report'}; run `vrh-lmms report` on the run first")


def run(args: argparse.Namespace) -> int:
    root = Path(args.run)
    if not root.is_dir():
        raise VRHError(f"{root}: no such folder")
    folder = report_folder(root)
    path = write_explorer(folder, roots=[root], title=args.title)
    size = path.stat().st_size / 1e6
    console.print_summary(console.files_table("Explorer written", [
        (path, f"the run's heads, docs and drops as one page ({size:.1f} MB; open it in a browser, no network)")]))
    return 0
