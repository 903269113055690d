"""The registry of evidence kinds: what a doc's `vrh_evidence` names, and how it becomes key positions.

Discovery scores a head by the attention its query rows put on the doc's evidence. Each kind owns two steps:
`target(doc, where)` reads the doc (refusing a malformed one in one line) and `keys(target, ctx)` maps it to key
positions of the sequence the language model attends over, through the family's own layout. A doc without
`vrh_evidence` is a `box` doc (every grounding task); any unregistered kind is refused, naming the known ones.
Adding a kind is one `register_evidence(EvidenceKind(...))` in its own module, listed in `KIND_MODULES`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from vrh_lmms.base.errors import VRHError
from vrh_lmms.harness import lmms

KIND_BOX = "box"
KIND_TEXT = "text"


@dataclass(frozen=True)
class KeyContext:
    """What a kind may read to place its keys: the backend, its processor and tokenizer, the generate inputs, the
    prompt ids as the language model sees them, the full (prompt + answer) length and the `--key-tokens` rule."""

    family: str
    processor: Any
    tokenizer: Any
    backend: Any
    tensors: Mapping[str, torch.Tensor]
    prompt_ids: torch.Tensor  # (prompt_len,) long
    seq_len: int
    key_tokens: str = "overlap"
    extras: Mapping[str, Any] | None = None  # single-image layout extras (vrh_lmms.model.capture.extras), when computed
    # the words the prompt holds where the doc's query stood: None for the real prompt, "N/A" in the null-question
    # pass (vrh_lmms.runs.discovery.controls), whose text no longer holds the query
    query_replaced_by: str | None = None


@dataclass
class EvidenceKeys:
    """evidence: the key set scored (`box` in the stored statistics); media: every media placeholder (the `image`
    key set, image_mass); tmap: the single image's token map, for the Localization Heads grid (None: no grid)."""

    evidence: torch.Tensor  # (seq_len,) bool
    media: torch.Tensor  # (seq_len,) bool
    tmap: Any = None


@dataclass(frozen=True)
class EvidenceKind:
    """name: the `vrh_evidence.kind` value. target: (doc, where) -> an object with `expression`, `image_id` and
    `image_size` ((w, h) of a single image the layout maps, else None). keys: (target, KeyContext) -> EvidenceKeys.
    grid: whether the kind has one image's token grid (Localization Heads' spatial entropy)."""

    name: str
    target: Callable[[Mapping[str, Any], str], Any]
    keys: Callable[[Any, KeyContext], EvidenceKeys]
    grid: bool = False
    doc: str = ""


EVIDENCE_KINDS: dict[str, EvidenceKind] = {}
# modules that register kinds (imported on first lookup, so the registry fills without import cycles)
KIND_MODULES = ("vrh_lmms.runs.discovery.box_evidence", "vrh_lmms.runs.discovery.text_span",
                "vrh_lmms.runs.discovery.multi_image", "vrh_lmms.runs.discovery.video_evidence",
                "vrh_lmms.runs.discovery.audio_evidence")


def register_evidence(kind: EvidenceKind, replace: bool = False) -> EvidenceKind:
    if kind.name in EVIDENCE_KINDS and not replace and EVIDENCE_KINDS[kind.name] != kind:
        raise VRHError(f"evidence kind {kind.name!r} is already registered")
    EVIDENCE_KINDS[kind.name] = kind
    return kind


def _load() -> None:
    for module in KIND_MODULES:
        importlib.import_module(module)


def known_kinds() -> list[str]:
    _load()
    return sorted(EVIDENCE_KINDS)


def evidence_kind(doc: Mapping[str, Any]) -> str:
    """The doc's evidence kind: `box` without `vrh_evidence`, else its registered `kind` (refused when unknown)."""
    ev = doc.get("vrh_evidence")
    if ev is None:
        return KIND_BOX
    kind = ev.get("kind") if isinstance(ev, Mapping) else None
    if kind not in known_kinds():
        raise VRHError(f"vrh_evidence kind {kind!r} is not supported; known: {', '.join(known_kinds())}")
    return kind


def get_kind(name: str) -> EvidenceKind:
    _load()
    if name not in EVIDENCE_KINDS:
        raise VRHError(f"evidence kind {name!r} is not registered; known: {', '.join(known_kinds())}")
    return EVIDENCE_KINDS[name]


def media_mask(ids: torch.Tensor, token_ids, seq_len: int) -> torch.Tensor:
    """(seq_len,) bool: the prompt positions holding any of `token_ids` (media placeholders)."""
    mask = torch.zeros(seq_len, dtype=torch.bool)
    wanted = torch.as_tensor(list(token_ids), dtype=ids.dtype)
    mask[:ids.numel()] = torch.isin(ids.cpu(), wanted)
    return mask


def check_docs(tm, tasks: list[str], limit: int | float | None = None, only: set[int] | None = None) -> None:
    """Every doc a run will read (`only`: just these doc ids) carries readable evidence (a box inside its image, a
    text span, ...), read here by its evidence kind as the collector reads it, so that a bad doc is one line naming
    the task, doc id and field before any folder is claimed or weights load. The datasets load here once more
    (lmms-eval caches them)."""
    for task, doc_id, doc in lmms.eval_docs(tm, tasks, limit, only):
        get_kind(evidence_kind(doc)).target(doc, f"{task} doc {doc_id}")
