"""Which configurations a sweep evaluates, and their stable ids (docs/contracts.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from vrh_lmms.errors import VRHError


@dataclass(frozen=True)
class Configuration:
    id: str
    kind: str  # baseline | topk | random | layer_matched | image_matched
    k: int
    seed: int | None
    mode: str  # none | zero | mean | uniform | uniform_image
    spec: str

    def to_dict(self) -> dict:
        return asdict(self)


def _suffix(mode: str) -> str:
    return "" if mode == "zero" else f"_{mode}"


def plan_configurations(ks: Sequence[int], random_seeds: int, layer_matched: bool, modes: Sequence[str],
                        random: bool = True, controls: Sequence[str] = (),
                        control_tolerance: float | None = None) -> list[Configuration]:
    """Baseline, then per k and mode: top-k, random-k per seed, layer-matched random-k per seed, and each extra
    control per seed (`image-matched`: vrh_lmms.sweep.controls; `control_tolerance` overrides its tolerance)."""
    from vrh_lmms.sweep.controls import CONTROL_KINDS

    unknown = [c for c in controls if c not in CONTROL_KINDS]
    if unknown:
        raise VRHError(f"--control {unknown[0]!r}: use {', '.join(CONTROL_KINDS)}")
    if not ks:
        raise VRHError("a sweep needs at least one k (--k 1,5,10)")
    if any(k <= 0 for k in ks):
        raise VRHError(f"--k values must be positive, got {list(ks)}")
    if random_seeds < 0:
        raise VRHError("--random-seeds must be >= 0")
    from vrh_lmms.ablation import MODES

    for mode in modes:
        if mode not in MODES:
            raise VRHError(f"--ablation {mode!r}: use any of {', '.join(MODES)}")
    out = [Configuration("baseline", "baseline", 0, None, "none", "none")]
    for mode in modes:
        sfx = _suffix(mode)
        for k in sorted(set(ks)):
            out.append(Configuration(f"top{k}{sfx}", "topk", k, None, mode, f"top{k}"))
            if random:
                for s in range(random_seeds):
                    out.append(Configuration(f"random{k}_s{s}{sfx}", "random", k, s, mode, f"random{k}"))
            if layer_matched:
                for s in range(random_seeds):
                    out.append(Configuration(f"layer_matched{k}_s{s}{sfx}", "layer_matched", k, s, mode,
                                             f"like:top{k}"))
            for control in controls:
                kind = CONTROL_KINDS[control]
                tol = "" if control_tolerance is None else f"~{control_tolerance:g}"
                for s in range(random_seeds):
                    out.append(Configuration(f"{kind}{k}_s{s}{sfx}", kind, k, s, mode, f"{kind}:top{k}{tol}"))
    return out


def parse_int_list(text: str, what: str) -> list[int]:
    try:
        return [int(v) for v in str(text).replace(";", ",").split(",") if v.strip()]
    except ValueError:
        raise VRHError(f"{what} {text!r}: expected comma-separated integers, e.g. 1,5,10,20") from None
