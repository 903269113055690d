"""The paper's protocol as presets (`--preset paper` on discover and sweep): which settings it fixes, in one place.

Park et al. (arXiv 2608.27417, Sec. 3 and Tables A1/A9): heads detected on 200 RefCOCO val samples with every image
token whose patch overlaps the box as a key token (our rule `any`) and Q_out + sum + mean; evaluation on the
disjoint rest at k in {0, 1, 3, 5, 10, 20} (Table A1; {5, 10, 20, 50} for the scoring variants of Table A9), with
a random-k control drawn uniformly from all heads and, for its seven extra models, one drawn outside the detected
set. A preset only fills in what the command line leaves unset: an explicit flag wins.

The presets keep the live control pool (vrh_lmms.base.heads.spec): on a checkpoint where every head writes (every real
one) it draws exactly the paper's uniform random heads; on a pruned model (the shipped demo model: 54 of 96 heads
write nothing) uniform draws would hold heads whose masking changes nothing by construction, a control that cannot
move. `--control-pool all` gives the paper's literal definition.
"""

from __future__ import annotations

from typing import Any

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.base.heads.kinds import DEFAULT_POOL
from vrh_lmms.runs.discovery.scoring import DEFAULT_CELL, parse_cells

DISCOVER_PRESETS: dict[str, dict[str, Any]] = {
    "paper": {"limit": 200, "key_tokens": "any", "scoring": "out,sum,mean"},
}
SWEEP_PRESETS: dict[str, dict[str, Any]] = {
    "paper": {"k": "1,3,5,10,20", "controls": ["random-outside"], "exclude_discovery_docs": "auto"},
    "paper_a9": {"k": "5,10,20,50", "controls": ["random-outside"], "exclude_discovery_docs": "auto"},
}
BUILTIN = {"limit": 200, "key_tokens": "overlap", "scoring": DEFAULT_CELL, "k": "1,5,10,20,40", "controls": [],
           "control_pool": DEFAULT_POOL, "exclude_discovery_docs": "off"}


def resolve(presets: dict[str, dict[str, Any]], name: str | None, given: dict[str, Any]) -> dict[str, Any]:
    """Each setting: the command line's value if given (not None), else the preset's, else the built-in default."""
    if name is not None and name not in presets:
        raise VRHError(f"--preset {name!r}: use one of {', '.join(presets)}")
    chosen = presets.get(name, {}) if name else {}
    return {key: value if value is not None else chosen.get(key, BUILTIN[key]) for key, value in given.items()}


# The scorer comparisons of Fig 2 / Table A9 (the default cell with one axis flipped), Fig 3 (prior methods' heads,
# as presets of vrh_lmms.runs.discovery.scoring), Fig 8b (one random output token as the query) and Table A8 (the union
# Q_in u Q_out); `paper` is all of them.
SCORER_SETS: dict[str, list[str]] = {
    "fig2": ["in,sum,mean", "out,argmax,mean", "out,sum,freq"],
    "fig3": ["retrieval_heads", "qrhead", "ocr_heads", "vera", "localization_heads"],
    "fig8b": ["out_random1,sum,mean"],
    "a8": ["in+out,sum,mean"],
}
SCORER_SETS["paper"] = [c for name in ("fig2", "fig3", "fig8b", "a8") for c in SCORER_SETS[name]]


def scorer_cells(text: str, primary: str) -> list[str]:
    """`--compare-cells`: a set name (fig2, fig3, fig8b, a8, paper) or a '+'-separated list of cells and presets, as the
    distinct cells to mask besides the heads file's primary one (a preset sharing a cell is masked once)."""
    names = SCORER_SETS.get(text.strip())
    cells = parse_cells("+".join(names) if names else text)
    return [c for c in cells if c != primary]


def compare_cells(text: str | None, heads_file: str | None) -> list[str]:
    """The distinct cells --compare-cells names, checked against the heads file's cells before any model loads."""
    if not text:
        return []
    if not heads_file:
        raise VRHError("--compare-cells needs --heads-file (it holds each cell's ranking)")
    hf = load_heads_file(heads_file)
    cells = scorer_cells(text, hf.scoring.get("cell") or "")
    for cell in cells:
        try:
            hf.cell_name(cell)
        except VRHError as exc:
            raise VRHError(f"--compare-cells: {heads_file}: {exc}") from None
    return cells
