"""`vrh-lmms explore RUN`: write (or refresh) the explorer page of a run folder or a report folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from vrh_lmms.base import console, folder_lock
from vrh_lmms.base.errors import VRHError
from vrh_lmms.report.explorer import write_explorer, write_heads_explorer


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN",
                        help="a report folder (holding report.json), a run folder holding one in report/ "
                             "(vrh-lmms demo, replicate), or a heads file (a discovery: its scores alone)")
    parser.add_argument("--output", default=None, metavar="FILE",
                        help="where a heads file's page goes (default: none; required for a heads file, while a "
                             "report's page is always its folder's explorer.html)")
    parser.add_argument("--title", default=None, help="the page's title (default: the models it shows)")


def report_folder(run: Path) -> Path:
    """The folder holding the run's report.json: RUN itself or RUN/report."""
    for folder in (run, run / "report"):
        if (folder / "report.json").is_file():
            return folder
    sweep = " (a sweep folder)" if (run / "sweep.json").is_file() else ""
    raise VRHError(f"{run}{sweep}: no report.json here or in {run / 'report'}; `vrh-lmms report {run} --output DIR` "
                   f"writes DIR/explorer.html beside the report")


def run(args: argparse.Namespace) -> int:
    root = Path(args.run)
    if root.is_file():
        if not args.output:
            raise VRHError(f"{root} is a file: give --output FILE.html for its page (e.g. --output "
                           f"{root.with_suffix('').name}_explorer.html)")
        path = write_heads_explorer([root], args.output, title=args.title)
        what = "the heads file's scores, every scoring cell, as one page"
    elif not root.is_dir():
        raise VRHError(f"{root}: no such folder or heads file")
    else:
        if args.output:
            raise VRHError("--output is for a heads file; a report's page is its folder's explorer.html")
        folder = report_folder(root)
        with folder_lock.held(folder, "vrh-lmms explore", wait=args.wait):  # a report run may be writing it
            path = write_explorer(folder, roots=[root], title=args.title)
        what = "the run's heads, docs and drops as one page"
    size = path.stat().st_size / 1e6
    console.print_summary(console.files_table("Explorer written", [
        (path, f"{what} ({size:.1f} MB; open it in a browser, no network)")]))
    return 0
