"""Which configurations a sweep evaluates, and their stable ids (docs/contracts.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from vrh_lmms.base.errors import VRHError


@dataclass(frozen=True)
class Configuration:
    id: str
    kind: str  # baseline | topk | random | random_all | layer_matched | image_matched
    k: int
    seed: int | None
    mode: str  # none | zero | mean | uniform | uniform_image
    spec: str
    cell: str | None = None  # scorer_topk: the heads file's scoring cell whose ranking `spec` reads

    def to_dict(self) -> dict:
        out = asdict(self)
        if self.cell is None:
            out.pop("cell")
        return out


def _suffix(mode: str) -> str:
    return "" if mode == "zero" else f"_{mode}"


def plan_configurations(ks: Sequence[int], random_seeds: int, layer_matched: bool, modes: Sequence[str],
                        random: bool = True, controls: Sequence[str] = (),
                        control_tolerance: float | None = None, uniform_random: bool = False,
                        cells: Sequence[str] = (), random_skip_layer0: bool = False) -> list[Configuration]:
    """Baseline, then per k and mode: top-k, random-k per seed, layer-matched random-k per seed, and each extra
    control per seed (`image-matched`: vrh_lmms.base.heads.controls; `control_tolerance` overrides its tolerance).
    `uniform_random` adds `random_all` draws over all heads, dead ones included (spec random<K>@all), beside the
    run's control pool: the paper's random control next to the live one. `cells` adds, per k, the top-k of each
    other scoring cell of the heads file (`scorer_<cell>_top<k>`: the scorer comparison of the paper's Figs 2/3).
    `random_skip_layer0` draws the random-k heads outside layer 0 (spec random<K>:skip_layer0, the paper's DPO
    control), same ids."""
    from vrh_lmms.base.heads.controls import CONTROL_OPTIONS

    unknown = [c for c in controls if c not in CONTROL_OPTIONS]
    if unknown:
        raise VRHError(f"--control {unknown[0]!r}: use {', '.join(CONTROL_OPTIONS)}")
    if not ks:
        raise VRHError("a sweep needs at least one k (--k 1,5,10)")
    if any(k <= 0 for k in ks):
        raise VRHError(f"--k values must be positive, got {list(ks)}")
    if random_seeds < 0:
        raise VRHError("--random-seeds must be >= 0")
    from vrh_lmms.model.ablation import MODES

    for mode in modes:
        if mode not in MODES:
            raise VRHError(f"--ablation {mode!r}: use any of {', '.join(MODES)}")
    out = [Configuration("baseline", "baseline", 0, None, "none", "none")]
    for mode in modes:
        sfx = _suffix(mode)
        for k in sorted(set(ks)):
            out.append(Configuration(f"top{k}{sfx}", "topk", k, None, mode, f"top{k}"))
            for cell in cells:
                out.append(Configuration(f"scorer_{cell_slug(cell)}_top{k}{sfx}", "scorer_topk", k, None, mode,
                                         f"top{k}", cell))
            if random:
                for s in range(random_seeds):
                    out.append(Configuration(f"random{k}_s{s}{sfx}", "random", k, s, mode,
                                             f"random{k}" + (":skip_layer0" if random_skip_layer0 else "")))
            if uniform_random:
                for s in range(random_seeds):
                    out.append(Configuration(f"random_all{k}_s{s}{sfx}", "random_all", k, s, mode,
                                             f"random{k}@all"))
            if layer_matched:
                for s in range(random_seeds):
                    out.append(Configuration(f"layer_matched{k}_s{s}{sfx}", "layer_matched", k, s, mode,
                                             f"like:top{k}"))
            for control in controls:
                kind = CONTROL_OPTIONS[control]
                tol = "" if control_tolerance is None or kind != "image_matched" else f"~{control_tolerance:g}"
                for s in range(random_seeds):
                    out.append(Configuration(f"{kind}{k}_s{s}{sfx}", kind, k, s, mode, f"{kind}:top{k}{tol}"))
    return out


def cell_slug(cell: str) -> str:
    """A scoring cell as part of a configuration id: `in,sum,mean` -> `in-sum-mean`."""
    return cell.replace(",", "-")


def unpackable_reason(cfg: Configuration) -> str | None:
    """Why a configuration must run alone rather than in a pack (None: it can share one)."""
    from vrh_lmms.model.ablation import UNIFORM_MODES

    if cfg.mode in UNIFORM_MODES:
        return (f"ablation {cfg.mode} replaces answer-row attention, which a pack's per-row o_proj masks cannot "
                "carry")
    return None


def _even_groups(configs: Sequence[Configuration], size: int) -> list[list[Configuration]]:
    if not configs:
        return []
    n_groups = -(-len(configs) // size)
    base, extra = divmod(len(configs), n_groups)
    groups, start = [], 0
    for g in range(n_groups):
        end = start + base + (1 if g < extra else 0)
        groups.append(list(configs[start:end]))
        start = end
    return groups


def pack_groups(configs: Sequence[Configuration], size: int) -> list[list[Configuration]]:
    """Consecutive groups of at most `size` configurations, as even as possible (22 by 16 -> 11 + 11); a
    configuration that cannot be packed (`unpackable_reason`) is a group of its own, in its place."""
    if size < 1:
        raise VRHError(f"--pack must be >= 1, got {size}")
    groups: list[list[Configuration]] = []
    run: list[Configuration] = []
    for cfg in configs:
        if unpackable_reason(cfg) is None:
            run.append(cfg)
            continue
        groups += _even_groups(run, size) + [[cfg]]
        run = []
    return groups + _even_groups(run, size)


def parse_pack(text: str | int | None) -> int | None:
    """`--pack`: a positive integer, or `auto` (None)."""
    if text is None or str(text).strip().lower() == "auto":
        return None
    try:
        value = int(str(text))
    except ValueError:
        raise VRHError(f"--pack {text!r}: expected a positive integer or auto") from None
    if value < 1:
        raise VRHError(f"--pack {text!r}: expected a positive integer or auto")
    return value


def parse_int_list(text: str, what: str) -> list[int]:
    try:
        return [int(v) for v in str(text).replace(";", ",").split(",") if v.strip()]
    except ValueError:
        raise VRHError(f"{what} {text!r}: expected comma-separated integers, e.g. 1,5,10,20") from None
