"""`vrh-lmms sample-efficiency HEADS_FILE`: how many samples discovery needs (top-k overlap vs n)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from vrh_lmms.discovery.efficiency import DEFAULT_NS, efficiency_markdown, efficiency_plot, sample_efficiency
from vrh_lmms.discovery.run import sidecars
from vrh_lmms.errors import VRHError
from vrh_lmms.heads.heads_file import load_heads_file
from vrh_lmms.sweep.plan import parse_int_list


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("heads_file", help="heads file written by `vrh-lmms discover` (its .samples.npz is read)")
    parser.add_argument("--cell", default=None, help="scoring cell (default: the heads file's primary cell)")
    parser.add_argument("--k", type=int, default=20, help="top-k to compare (default 20, capped at 10%% of heads)")
    parser.add_argument("--ns", default=",".join(map(str, DEFAULT_NS)), help="sample counts n to try")
    parser.add_argument("--resamples", type=int, default=200, help="bootstrap resamples per n (default 200)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", required=True, help="folder for efficiency.md, efficiency.json, efficiency.png")
    parser.add_argument("--force", action="store_true", help="overwrite existing outputs")


def load_samples(heads_file: str | Path) -> list[dict[str, np.ndarray]]:
    path = sidecars(heads_file)["samples"]
    if not path.is_file():
        raise VRHError(f"{path} not found: sample efficiency needs the per-sample statistics that "
                       f"`vrh-lmms discover` writes beside the heads file")
    with np.load(path) as data:
        names = [n for n in data.files if n != "keys"]
        arrays = {n: data[n] for n in names}
    n = len(next(iter(arrays.values())))
    return [{name: arrays[name][i] for name in names} for i in range(n)]


def run(args: argparse.Namespace) -> int:
    hf = load_heads_file(args.heads_file)
    cell = args.cell or hf.scoring.get("cell") or "out,sum,mean"
    k = min(args.k, max(1, hf.geometry.total_heads // 10))
    out = Path(args.output)
    targets = [out / "efficiency.md", out / "efficiency.json", out / "efficiency.png"]
    if any(t.exists() for t in targets) and not args.force:
        raise VRHError(f"{out} already holds efficiency results; pass --force to overwrite them")
    samples = load_samples(args.heads_file)
    freq_k = int(hf.scoring.get("freq_top_k") or 20)
    rows, full = sample_efficiency(samples, cell, k, parse_int_list(args.ns, "--ns"), args.resamples, args.seed,
                                   freq_top_k=freq_k)
    out.mkdir(parents=True, exist_ok=True)
    targets[0].write_text(efficiency_markdown(rows, k, cell))
    targets[1].write_text(json.dumps({"cell": cell, "k": k, "n_total": rows[-1].n, "resamples": args.resamples,
                                      "full_top_k": sorted(f"L{l}H{h}" for l, h in full),
                                      "rows": [r.__dict__ for r in rows]}, indent=1))
    efficiency_plot(rows, k, cell, targets[2])
    print(targets[0].read_text())
    return 0
