"""The head-scoring design space: query tokens Q x key aggregation Phi x sample aggregation Omega, plus retrieval.

Per sample, capture yields for each query set Q (`in`: referring-expression tokens, `out`: the positions emitting
the answer tokens, `out_coords`: those emitting coordinate tokens, `out_random1`: ONE answer-emitting row drawn at
random per sample, seeded by the doc key (paper Fig 8b), `in+out`: the union of the `in` and `out` rows (paper
Table A8)) and each head:
  - `sum`:    the attention mass that the rows put on the box's image tokens, averaged over rows;
  - `argmax`: the share of rows whose most-attended key lies in the box;
and the copy-paste retrieval score of Wu et al. (share of answer tokens that a head's top-1 key copies).
Across samples, Omega `mean` averages the per-sample scores and `freq` counts how often a head is among a sample's
top-k heads. `localization_heads` is the Localization Heads scorer of Kang et al.
(vrh_lmms.runs.discovery.localization).
Presets name the cells the paper's Fig 3 uses for prior methods (PRESETS); they resolve to a cell everywhere a cell
is accepted. Everything here is pure numpy on those per-sample arrays.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import Geometry

QUERIES = ("in", "out", "out_coords", "out_random1", "in+out")
KEYS = ("argmax", "sum")
AGGREGATES = ("mean", "freq")
RETRIEVAL = "retrieval"
LOCALIZATION = "localization_heads"
DEFAULT_CELL = "out,sum,mean"
# Prior methods as cells of the design space, as the paper's Fig 3 scores them (paper-protocol.md, Fig 3 row).
PRESETS = {
    "retrieval_heads": "out,argmax,mean",  # Wu et al.: the paper's Fig 3 cell (the copy-paste score is `retrieval`)
    "qrhead": "in,sum,mean",  # QRHead
    "ocr_heads": "out,argmax,mean",  # OCR Heads
    "vera": "out,sum,mean",  # VERA
    "vrh": "out,sum,mean",  # this paper's default
    "localization_heads": LOCALIZATION,  # Kang et al.: Q = last input token, spatial entropy, freq
}
_UNION = re.compile(r"(?<![A-Za-z0-9_])in\+out(?=,)")  # the `in+out` query set inside a '+'-separated list


@dataclass(frozen=True)
class Cell:
    query: str
    key: str
    aggregate: str

    @property
    def name(self) -> str:
        return f"{self.query},{self.key},{self.aggregate}"

    @property
    def quantity(self) -> str:
        """Name of the per-sample array this cell reads."""
        return f"{self.query}_{self.key}"


def all_cells() -> list[str]:
    return [f"{q},{k},{a}" for q in QUERIES for k in KEYS for a in AGGREGATES] + [RETRIEVAL, LOCALIZATION]


def preset_cell(text: str) -> str:
    """A preset's cell name (`qrhead` -> `in,sum,mean`); any other text unchanged."""
    return PRESETS.get(text.strip(), text)


def presets_for(cells: Iterable[str]) -> dict[str, str]:
    """The heads file's `presets` block: every preset whose cell these cells hold, preset name -> cell name."""
    held = set(cells)
    return {name: cell for name, cell in PRESETS.items() if cell in held}


def parse_cell(text: str) -> Cell | str:
    """`out,sum,mean` -> Cell; `retrieval` / `localization_heads` -> that name; a preset -> its cell. Names the bad
    part otherwise."""
    text = preset_cell(text.strip().replace(" ", "").replace(";", ",").replace("/", ","))
    if text in (RETRIEVAL, LOCALIZATION):
        return text
    parts = text.split(",")
    if len(parts) != 3:
        raise VRHError(f"scoring cell {text!r}: expected Q,Phi,Omega such as 'out,sum,mean', 'retrieval', or a "
                       f"preset ({', '.join(PRESETS)})")
    q, k, a = parts
    for value, allowed, axis in ((q, QUERIES, "Q"), (k, KEYS, "Phi"), (a, AGGREGATES, "Omega")):
        if value not in allowed:
            raise VRHError(f"scoring cell {text!r}: {axis}={value!r} is not one of {', '.join(allowed)}")
    return Cell(q, k, a)


def parse_cells(text: str | None) -> list[str]:
    """`all`, a single cell or preset, or several separated by `+` (cells themselves contain commas; the query set
    `in+out` is read as one name). Presets become their cells; each cell is listed once."""
    if not text or text == "all":
        return all_cells()
    out: list[str] = []
    for chunk in _UNION.sub("in\0out", text).split("+"):
        cell = parse_cell(chunk.replace("\0", "+"))
        name = cell if isinstance(cell, str) else cell.name
        if name not in out:
            out.append(name)
    return out


def per_sample_matrix(samples: Sequence[dict[str, np.ndarray]], quantity: str) -> np.ndarray:
    """Stack one quantity over samples: (n, layers, heads), NaN where a sample has no rows of that query set."""
    if not samples:
        raise VRHError("no samples to score")
    try:
        return np.stack([np.asarray(s[quantity], dtype=np.float64) for s in samples])
    except KeyError:
        raise VRHError(f"per-sample statistics lack {quantity!r}") from None


def top_k_membership(scores: np.ndarray, k: int) -> np.ndarray:
    """(n, L, H) per-sample scores -> (n, L, H) 0/1: head among that sample's top-k (ties by layer, then head).

    Rows that are all NaN (the sample had no such query rows) stay NaN.
    """
    n, layers, heads = scores.shape
    flat = scores.reshape(n, -1)
    k = min(k, flat.shape[1])
    out = np.zeros_like(flat)
    valid = ~np.isnan(flat).all(axis=1)
    # argsort of -score is stable, so equal scores keep head order: deterministic tie-breaking.
    order = np.argsort(-np.nan_to_num(flat, nan=-np.inf), axis=1, kind="stable")[:, :k]
    np.put_along_axis(out, order, 1.0, axis=1)
    out[~valid] = np.nan
    return out.reshape(n, layers, heads)


def aggregate(per_sample: np.ndarray, how: str, freq_top_k: int) -> np.ndarray:
    """Omega: combine per-sample head scores (n, L, H) into one (L, H) score."""
    valid = ~np.isnan(per_sample).all(axis=(1, 2))
    if not valid.any():
        return np.full(per_sample.shape[1:], np.nan)
    per_sample = per_sample[valid]
    if how == "mean":
        return np.nanmean(per_sample, axis=0)
    if how == "freq":
        return np.nanmean(top_k_membership(per_sample, freq_top_k), axis=0)
    raise VRHError(f"unknown sample aggregation {how!r}; use one of {', '.join(AGGREGATES)}")


def cell_scores(samples: Sequence[dict[str, np.ndarray]], cell: str, freq_top_k: int) -> np.ndarray:
    """(layers, heads) scores of one design-space cell over these samples."""
    parsed = parse_cell(cell)
    if parsed == RETRIEVAL:
        return aggregate(per_sample_matrix(samples, RETRIEVAL), "mean", freq_top_k)
    if parsed == LOCALIZATION:
        # deferred: keeps `vrh-lmms discover --help` free of scipy
        from vrh_lmms.runs.discovery.localization import ENTROPY, IMAGE_SUM, frequency

        return frequency(per_sample_matrix(samples, ENTROPY), per_sample_matrix(samples, IMAGE_SUM), freq_top_k)
    return aggregate(per_sample_matrix(samples, parsed.quantity), parsed.aggregate, freq_top_k)


def default_freq_top_k(total_heads: int) -> int:
    """Paper: top-20 of ~1,000 heads (2%); capped at 10% of heads so tiny models stay selective."""
    return max(1, min(20, total_heads // 10))


def rank(scores: np.ndarray, geometry: Geometry | None = None) -> list[tuple[int, int]]:
    """Heads best first; NaN last; ties broken by layer then head. With `geometry`, only the heads it has: a hybrid
    decoder's layers without heads (their rows NaN) are left out, so no ranking or top-k names them."""
    layers, heads = scores.shape
    flat = np.nan_to_num(scores.reshape(-1), nan=-np.inf)
    order = np.argsort(-flat, kind="stable")
    out = [(int(i) // heads, int(i) % heads) for i in order]
    return out if geometry is None or geometry.head_layers is None else [x for x in out if geometry.has_heads(x[0])]


def score_all(samples: Sequence[dict[str, np.ndarray]], cells: Iterable[str], freq_top_k: int) -> dict[str, np.ndarray]:
    return {cell: cell_scores(samples, cell, freq_top_k) for cell in cells}
