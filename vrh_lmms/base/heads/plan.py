"""Which head-set configurations a run evaluates (a sweep, steering, patching, the locator), how each resolves to
its head set, and their stable ids (docs/contracts.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import kinds
from vrh_lmms.base.heads.kinds import DEFAULT_POOL
from vrh_lmms.base.heads.spec import ControlUnavailable, HeadSet, check_heads_file_fits, resolve_spec

# How a configuration's heads are ablated: zero or mean fold into o_proj (vrh_lmms.model.ablation); the uniform modes
# replace the heads' answer-row attention (vrh_lmms.model.interventions.uniform).
UNIFORM_MODES = ("uniform", "uniform_image")
MODES = ("zero", "mean", *UNIFORM_MODES)


@dataclass(frozen=True)
class Configuration:
    id: str
    kind: str  # a configuration kind of vrh_lmms.base.heads.kinds
    k: int
    seed: int | None
    mode: str  # none | zero | mean | uniform | uniform_image
    spec: str
    cell: str | None = None  # scorer_topk: the heads file's scoring cell whose ranking `spec` reads
    # what a control's draw comes from (kinds.POOLS), chosen once when the run is planned; not in `to_dict`: a
    # manifest records the run's pool once (its `control_pool`)
    pool: str = DEFAULT_POOL

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("pool")
        if self.cell is None:
            out.pop("cell")
        return out


def planned_headset(cfg, geometry, heads_file=None, dead: tuple = (), allow_cross_model: bool = False) -> HeadSet:
    """The heads of a planned head set (a `Configuration`, a steering run's `SteerConfig`: its spec, seed, pool and
    scoring cell) on a model of `geometry` whose `dead` heads write nothing."""
    return resolve_spec(cfg.spec, geometry, heads_file=heads_file, seed=cfg.seed if cfg.seed is not None else 0,
                        allow_cross_model=allow_cross_model, dead=dead, pool=cfg.pool, cell=getattr(cfg, "cell", None))


class HeadSets:
    """Each configuration's head set, resolved once per model shape and handed forward: a run's checks resolve every
    configuration against the heads file's geometry, the checkpoint's config.json and the loaded model (so none
    fails after others have run), and the run uses the same `HeadSet` where the shape and the dead heads are the
    same, instead of drawing it again (the same seeds draw the same heads either way)."""

    def __init__(self, heads_file=None, allow_cross_model: bool = False) -> None:
        self.heads_file, self.allow_cross_model = heads_file, allow_cross_model
        self._resolved: dict[tuple, HeadSet] = {}

    def get(self, cfg, geometry, dead: tuple = ()) -> HeadSet:
        key = (cfg, geometry, tuple(dead))
        if key not in self._resolved:
            self._resolved[key] = planned_headset(cfg, geometry, self.heads_file, dead, self.allow_cross_model)
        return self._resolved[key]

    def __len__(self) -> int:
        """How many resolutions were made (one per configuration when the shape never changed)."""
        return len(self._resolved)


def check_headsets(configurations, geometry, heads_file, dead: tuple = (), allow_cross_model: bool = False,
                   headsets: HeadSets | None = None) -> dict[str, str]:
    """Resolve every configuration's head set (`planned_headset`, from the pool it carries) against
    `geometry` and the model's `dead` heads (k too large, a heads file of another model), so no configuration fails
    after others have run. Returns the configurations whose control cannot be drawn from its pool (a layer without
    enough live heads), with the reason: they are reported as unavailable, never padded with dead heads. With
    `headsets` (of the same heads file) the head sets are kept there for the run to use."""
    if heads_file is not None:
        check_heads_file_fits(heads_file, geometry, allow_cross_model=allow_cross_model)
    unavailable: dict[str, str] = {}
    for cfg in configurations:
        try:
            if headsets is not None:
                headsets.get(cfg, geometry, dead)
            else:
                planned_headset(cfg, geometry, heads_file, dead, allow_cross_model)
        except ControlUnavailable as exc:
            unavailable[cfg.id] = str(exc)
        except VRHError as exc:
            raise VRHError(f"configuration {cfg.id} (--k {cfg.k}): {exc}") from None
    return unavailable


def from_dict(entry: dict, pool: str) -> Configuration:
    """A configuration as a manifest lists it (`to_dict`), in a run whose controls draw from `pool`."""
    names = {f.name for f in fields(Configuration)} - {"pool"}
    cfg = Configuration(**{k: v for k, v in entry.items() if k in names})
    own = kinds.BY_NAME[cfg.kind].pool if cfg.kind in kinds.BY_NAME else None
    return replace(cfg, pool=own or pool)


def carried_pool(configurations: Sequence, given: str | None = None) -> str:
    """The pool a planned run's controls draw from, as its configurations carry it (a variant's own pool, such as
    random_all's, aside); a pool `given` beside them (a run's spec) must be the same."""
    pools = {c.pool for c in configurations if not (c.kind in kinds.BY_NAME and kinds.BY_NAME[c.kind].pool)}
    if given is not None:
        pools.add(kinds.check_pool(given))
    if len(pools) > 1:
        raise VRHError(f"the configurations draw controls from the {' and the '.join(sorted(pools))} pools; plan "
                       "a run's configurations with one pool (plan_configurations(pool=))")
    return pools.pop() if pools else DEFAULT_POOL


def _suffix(mode: str) -> str:
    return "" if mode == "zero" else f"_{mode}"


def plan_configurations(ks: Sequence[int], random_seeds: int, layer_matched: bool, modes: Sequence[str],
                        random: bool = True, controls: Sequence[str] = (),
                        control_tolerance: float | None = None, uniform_random: bool = False,
                        cells: Sequence[str] = (), random_skip_layer0: bool = False,
                        pool: str = DEFAULT_POOL) -> list[Configuration]:
    """Baseline, then per k and mode: top-k, random-k per seed, layer-matched random-k per seed, and each extra
    control per seed (`--control` values, vrh_lmms.base.heads.kinds `OPTIONS`; `control_tolerance` overrides the
    image-matched tolerance). `uniform_random` adds `random_all` draws over all heads, dead ones included (spec
    random<K>@all), beside the run's control pool: the paper's random control next to the live one. `cells` adds,
    per k, the top-k of each other scoring cell of the heads file (`scorer_<cell>_top<k>`: the scorer comparison of
    the paper's Figs 2/3). `random_skip_layer0` draws the random-k heads outside layer 0 (spec random<K>:skip_layer0,
    the paper's DPO control), same ids. `pool`: what the controls draw from, carried by every configuration."""
    wanted = kinds.planned_controls({"random": random, "uniform_random": uniform_random,
                                     "layer_matched": layer_matched}, controls)
    if not ks:
        raise VRHError("a sweep needs at least one k (--k 1,5,10)")
    if any(k <= 0 for k in ks):
        raise VRHError(f"--k values must be positive, got {list(ks)}")
    if random_seeds < 0:
        raise VRHError("--random-seeds must be >= 0")
    kinds.check_pool(pool, "--control-pool")
    for mode in modes:
        if mode not in MODES:
            raise VRHError(f"--ablation {mode!r}: use any of {', '.join(MODES)}")
    options = {"skip_layer0": random_skip_layer0, "tolerance": control_tolerance}
    out = [Configuration("baseline", "baseline", 0, None, "none", "none", pool=pool)]
    for mode in modes:
        sfx = _suffix(mode)
        for k in sorted(set(ks)):
            out.append(Configuration(f"top{k}{sfx}", "topk", k, None, mode, f"top{k}", pool=pool))
            for cell in cells:
                out.append(Configuration(f"scorer_{cell_slug(cell)}_top{k}{sfx}", "scorer_topk", k, None, mode,
                                         f"top{k}", cell, pool=pool))
            for kind in wanted:
                spec = kinds.format_spec(kind, k, **options)
                out += [Configuration(f"{kind.id_prefix}{k}_s{s}{sfx}", kind.name, k, s, mode, spec,
                                      pool=kind.pool or pool) for s in range(random_seeds)]
    return out


def cell_slug(cell: str) -> str:
    """A scoring cell as part of a configuration id: `in,sum,mean` -> `in-sum-mean`."""
    return cell.replace(",", "-")


def parse_int_list(text: str, what: str) -> list[int]:
    try:
        return [int(v) for v in str(text).replace(";", ",").split(",") if v.strip()]
    except ValueError:
        raise VRHError(f"{what} {text!r}: expected comma-separated integers, e.g. 1,5,10,20") from None
