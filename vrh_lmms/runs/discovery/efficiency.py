"""Sample efficiency of discovery: how well n samples recover the top-k heads found with all samples.

For each n, draw bootstrap resamples of n samples (with replacement) from the full set, rank heads on each, and
measure the overlap |top-k(n) & top-k(all)| / k. The paper reports that 5-10 samples already find the top heads of
200; this reproduces that measurement for any heads run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vrh_lmms.base import atomic
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.escape import md
from vrh_lmms.base.heads.geometry import head_name
from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.runs.discovery.run import sidecars
from vrh_lmms.runs.discovery.scoring import LOCALIZATION, RETRIEVAL, aggregate, parse_cell, per_sample_matrix, rank

DEFAULT_NS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)


@dataclass
class EfficiencyRow:
    n: int
    mean_overlap: float
    sd_overlap: float
    q05: float
    q95: float
    exact_share: float  # share of resamples whose top-k equals the full top-k as a set


def _cell_matrix(samples: Sequence[dict[str, np.ndarray]], cell: str, freq_top_k: int) -> tuple[np.ndarray, str]:
    parsed = parse_cell(cell)
    if parsed == RETRIEVAL:
        return per_sample_matrix(samples, RETRIEVAL), "mean"
    if parsed == LOCALIZATION:  # each sample's selection; their mean is the frequency
        # deferred: keeps `vrh-lmms sample-efficiency --help` free of scipy
        from vrh_lmms.runs.discovery.localization import ENTROPY, IMAGE_SUM, selection

        pairs = zip(per_sample_matrix(samples, ENTROPY), per_sample_matrix(samples, IMAGE_SUM), strict=True)
        return np.stack([selection(e, s, freq_top_k) for e, s in pairs]), "mean"
    return per_sample_matrix(samples, parsed.quantity), parsed.aggregate


def top_set(scores: np.ndarray, k: int) -> set[tuple[int, int]]:
    return set(rank(scores)[:k])


def sample_efficiency(samples: Sequence[dict[str, np.ndarray]], cell: str, k: int, ns: Sequence[int] = DEFAULT_NS,
                      resamples: int = 200, seed: int = 0, freq_top_k: int = 20) -> tuple[list[EfficiencyRow], set]:
    """Overlap table for every n not larger than the number of samples (the full n is always included)."""
    per_sample, how = _cell_matrix(samples, cell, freq_top_k)
    valid = ~np.isnan(per_sample).all(axis=(1, 2))
    per_sample = per_sample[valid]
    total = per_sample.shape[0]
    if total == 0:
        raise VRHError(f"no sample has rows for cell {cell!r}")
    heads = per_sample.shape[1] * per_sample.shape[2]
    if not 1 <= k <= heads:
        raise VRHError(f"k={k} must be between 1 and the number of heads ({heads})")
    full = top_set(aggregate(per_sample, how, freq_top_k), k)
    rng = np.random.default_rng(seed)
    rows = []
    for n in sorted({*(n for n in ns if n < total), total}):
        overlaps = np.empty(resamples)
        for b in range(resamples):
            idx = rng.integers(0, total, size=n)
            overlaps[b] = len(top_set(aggregate(per_sample[idx], how, freq_top_k), k) & full) / k
        rows.append(EfficiencyRow(n, float(overlaps.mean()), float(overlaps.std(ddof=1)) if resamples > 1 else 0.0,
                                  float(np.quantile(overlaps, 0.05)), float(np.quantile(overlaps, 0.95)),
                                  float(np.mean(overlaps == 1.0))))
    return rows, full


def efficiency_markdown(rows: Sequence[EfficiencyRow], k: int, cell: str) -> str:
    lines = [f"Top-{k} overlap with the full-sample ranking ({md(cell)}), bootstrap resamples of n samples:", "",
             "| n | mean overlap | sd | 5% | 95% | identical top-k |", "|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r.n} | {r.mean_overlap:.3f} | {r.sd_overlap:.3f} | {r.q05:.2f} | {r.q95:.2f} | "
                     f"{r.exact_share:.0%} |")
    return "\n".join(lines) + "\n"


def efficiency_plot(rows: Sequence[EfficiencyRow], k: int, cell: str, path) -> None:
    # deferred: keeps `vrh-lmms sample-efficiency --help` free of matplotlib
    import matplotlib

    matplotlib.use("Agg")
    # deferred: keeps `vrh-lmms sample-efficiency --help` free of matplotlib
    import matplotlib.pyplot as plt

    ns = [r.n for r in rows]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(ns, [r.mean_overlap for r in rows], marker="o", label="mean")
    ax.fill_between(ns, [r.q05 for r in rows], [r.q95 for r in rows], alpha=0.25, label="5-95%")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("samples used for discovery (n)")
    ax.set_ylabel(f"top-{k} overlap with all samples")
    ax.set_title(f"Sample efficiency ({cell})")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def choose_k(requested: int | None, total_heads: int) -> int:
    """Top-k overlap is compared for k up to 10% of all heads (beyond that the top-k is much of the model and
    overlaps by construction): the default is min(20, that cap); a larger --k is an error, never a silent clamp."""
    cap = max(1, total_heads // 10)
    if requested is None:
        return min(20, cap)
    if requested < 1 or requested > cap:
        raise VRHError(f"--k {requested}: this model has {total_heads} heads, so k must be between 1 and {cap} "
                       f"(10% of its heads)")
    return requested


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


FILES = ("efficiency.md", "efficiency.json", "efficiency.png")


def write_efficiency(heads_file: str | Path, out: Path, *, cell: str | None = None, k: int | None = None,
                     ns: Sequence[int] | None = None, resamples: int = 200, seed: int = 0,
                     detailed: bool = True) -> tuple[list[EfficiencyRow], int, str]:
    """efficiency.md, .json and .png in `out` for a heads file's samples (`vrh-lmms sample-efficiency` and
    replicate's stage): the heads file's primary cell and k by default, and every sample count of DEFAULT_NS below
    the number of samples, then all of them. `detailed` adds the sample total, the resamples and the full top-k to
    the JSON (the command's file). Returns the rows, k and cell."""
    hf = load_heads_file(heads_file)
    cell = cell or hf.scoring.get("cell") or "out,sum,mean"
    k = choose_k(k, hf.geometry.total_heads)
    samples = load_samples(heads_file)
    ns = [n for n in DEFAULT_NS if n < len(samples)] + [len(samples)] if ns is None else list(ns)
    rows, full = sample_efficiency(samples, cell, k, ns, resamples, seed,
                                   freq_top_k=int(hf.scoring.get("freq_top_k") or 20))
    out.mkdir(parents=True, exist_ok=True)
    md_path, json_path, png_path = (out / name for name in FILES)
    atomic.write_text(md_path, efficiency_markdown(rows, k, cell))
    record = {"cell": cell, "k": k, "n_total": rows[-1].n, "resamples": resamples,
              "full_top_k": sorted(head_name(l, h) for l, h in full)} if detailed else {"cell": cell, "k": k}
    atomic.write_text(json_path, json.dumps({**record, "rows": [r.__dict__ for r in rows]}, indent=1))
    efficiency_plot(rows, k, cell, png_path)
    return rows, k, cell
