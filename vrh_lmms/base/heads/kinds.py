"""The kinds of head set, in one table: the spec a user types for each, how it is drawn, what a sweep names its
configurations, how reports name, order and colour it. Every module that handles kinds reads `KINDS`; a new kind is
one `Kind(...)` entry there (docs/architecture.md, "Where a new piece goes").

Spec forms (lists use `;` because lmms-eval splits model_args on commas):
  none                   no head ablated
  top<K>                 the K best heads of a heads file
  random<K>              K heads drawn uniformly from all heads (seeded)
  random<K>:skip_layer0  K heads drawn uniformly from the heads outside layer 0 (the control of the paper's DPO
                         experiment, Appendix B: 20 random heads, none in layer 0)
  like:top<K>            layer-matched random: in each layer, as many heads as top<K> has there, drawn from that
                         layer's other heads (aliases: random_like:top<K>, layer_matched<K>)
  random_outside:top<K>  K heads drawn at random outside the top-K set (the paper's control for its extra models;
                         alias random_outside<K>)
  image_matched:top<K>   image-matched: per top head, a head outside the top 2K whose attention mass on all image
                         tokens (heads file `image_mass`) is within 0.05 of it; `~T` sets the tolerance
                         (image_matched:top<K>~0.02; alias image_matched<K>)
  L12H3;L14H0            explicit heads

Control pools. A head whose o_proj columns are all zero writes nothing (`vrh_lmms.model.backbone.dead_heads`); ablating
it costs nothing by construction, so a control draw holding it controls for nothing. Controls draw from the live heads
by default (`DEFAULT_POOL`); `all` draws uniformly over all heads (the paper's definition) and records how many drawn
heads are dead. A `@all` or `@live` suffix on a control spec (random5@all) sets its pool whatever the run's default.
On a model without dead heads both pools give the same draws. A layer-matched draw that a layer cannot fill from its
pool raises `ControlUnavailable` (a VRHError) with the reason: callers report the configuration as unavailable
instead of padding it with dead heads.

Two configuration kinds are variants of another kind's spec: `random_all` (random<K>@all, uniform draws beside the
run's live ones) and `scorer_topk` (top<K> of another scoring cell of the heads file).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.controls import image_matched_heads
from vrh_lmms.base.heads.draws import explicit_heads, layer_matched_heads, random_heads
from vrh_lmms.base.heads.geometry import Geometry, HeadRef
from vrh_lmms.base.heads.heads_file import HeadsFile

LIVE, ALL = "live", "all"
POOLS = (LIVE, ALL)  # what control draws come from (module docstring)
DEFAULT_POOL = LIVE
IMAGE_MATCH_TOLERANCE = 0.05
_OPTION_TYPES: dict[str, Callable[[str], Any]] = {"tolerance": float, "skip_layer0": bool}  # regex group -> value


@dataclass(frozen=True)
class Draw:
    """What a kind's draw reads: the spec as typed (for messages), k, the model's geometry, the seed, the heads its
    pool leaves out, the heads file and scoring cell whose ranking it follows, and the spec's options."""

    text: str
    k: int
    geometry: Geometry
    seed: int
    exclude: frozenset[HeadRef]
    heads_file: HeadsFile | None
    cell: str | None
    options: Mapping[str, Any]

    def ranking(self) -> list[HeadRef]:
        if self.heads_file is None:
            raise VRHError(f"head spec {self.text!r} needs a heads file (heads_file=PATH)")
        return self.heads_file.cell_ranking(self.cell) if self.cell else self.heads_file.ranking

    def top(self) -> list[HeadRef]:
        """The first k of the ranking, refused where the heads file ranks fewer."""
        rank = self.ranking()
        if self.k > len(rank):
            raise VRHError(f"head spec {self.text!r} asks for more heads than the heads file ranks ({len(rank)})")
        return rank[:self.k]


@dataclass(frozen=True, kw_only=True)
class SpecForm:
    """How a kind is typed: `patterns` (full matches, case-insensitive; group `k`, option groups `tolerance`,
    `skip_layer0`), or `read` for a form no pattern says (explicit heads: text -> (k, options)); `write` gives the
    spec a plan writes, `(k, **options) -> str`; `canonical`: the head set records `write(k)`, not the typed text."""

    usage: str
    write: Callable[..., str]
    patterns: tuple[str, ...]
    read: Callable[[str], tuple[int, dict[str, Any]]] | None
    canonical: bool

    def match(self, text: str) -> tuple[int, dict[str, Any]] | None:
        for pattern in self.patterns:
            if m := re.fullmatch(pattern, text, re.IGNORECASE):
                groups = m.groupdict()
                options = {g: _OPTION_TYPES[g](v) for g, v in groups.items() if g != "k" and v is not None}
                return (int(groups["k"]) if groups.get("k") else 0), options
        return None


@dataclass(frozen=True, kw_only=True)
class Kind:
    """One kind of head set. Every field is given (None where it does not apply); `__post_init__` refuses a kind
    missing what its role needs (a control without its report names, a kind without a spec or a draw)."""

    name: str  # vrh.config.kind of its runs, report.json's `kind`, the key of its rows
    spec: SpecForm | None  # None: a variant, typed and drawn as `draws_as` with `pool`
    draw: Callable[[Draw], list[HeadRef]] | None
    needs_file: bool  # its draw reads a heads file's ranking
    control: bool  # a seeded draw that a claim is compared with (its pool applies)
    claim: bool  # a chosen head set (top-k, explicit heads) whose drop a claim is made of
    id_prefix: str | None  # configuration ids `<prefix><k>_s<seed>[_<mode>]`; None: ids of their own
    label: str | None  # the report's name of a control: "layer-matched random"
    legend: str | None  # plots and intervention tables: "layer-matched random-k"
    column: str | None  # the report's control table: "Layer-matched"
    optional_column: bool  # that column only where some row has such draws
    heads_text: str | None  # the heads-file label of one configuration, formatted with it: "{k} random heads ..."
    colour: str | None  # matplotlib colour of its points and bars; None: grey
    plan_flag: str | None  # the plan_configurations flag that adds it per k and seed (random, layer_matched ...)
    option: str | None  # the --control value that adds it
    option_help: str | None  # what --control's help says of it
    draws_as: str | None  # a variant: the kind whose spec and draw it uses
    pool: str | None  # a variant's own pool, whatever the run's (random_all: all)

    def __post_init__(self) -> None:
        def missing(what: str) -> VRHError:
            return VRHError(f"head-set kind {self.name!r}: {what}")

        if not re.fullmatch(r"[a-z][a-z_]*", self.name or ""):
            raise missing("its name must be lowercase letters and underscores")
        if (self.spec is None) == (self.draws_as is None):
            raise missing("give either its spec (spec=SpecForm(...)) or the kind it is a variant of (draws_as=)")
        if self.spec is not None and self.draw is None:
            raise missing("draw is missing")
        if self.control and self.claim:
            raise missing("a kind is a control or a claim, not both")
        if self.control:
            for name in ("label", "legend", "column", "colour"):
                if not getattr(self, name):
                    raise missing(f"a control needs {name}")
            if not (self.plan_flag or self.option):
                raise missing("a control needs plan_flag or option (how a sweep asks for it)")
            if not self.id_prefix:
                raise missing("a control needs id_prefix (its configuration ids)")
        if self.option and not self.option_help:
            raise missing("option_help is missing (--control's help for it)")
        if self.pool is not None and self.pool not in POOLS:
            raise missing(f"pool {self.pool!r}: use one of {', '.join(POOLS)}")

    @property
    def dashed(self) -> str:
        """The name as tables and help write it: `layer-matched`."""
        return self.name.replace("_", "-")

    @property
    def order(self) -> int:
        """Where its rows sort in reports: its place in `KINDS`."""
        return KINDS.index(self)

    @property
    def base(self) -> Kind:
        """The kind whose spec and draw it uses (itself unless a variant)."""
        return kind(self.draws_as) if self.draws_as else self


@dataclass(frozen=True)
class ParsedSpec:
    kind: Kind
    k: int
    options: dict[str, Any]
    pool: str | None  # a `@live` / `@all` suffix
    text: str  # the spec without its pool suffix


def _draw_random(d: Draw) -> list[HeadRef]:
    layer0 = frozenset(HeadRef(0, h) for h in range(d.geometry.heads)) if d.options.get("skip_layer0") else frozenset()
    return random_heads(d.geometry, d.k, d.seed, d.exclude | layer0)


def _draw_outside(d: Draw) -> list[HeadRef]:
    return random_heads(d.geometry, d.k, d.seed, d.exclude | frozenset(d.top()))


def _draw_layer_matched(d: Draw) -> list[HeadRef]:
    return layer_matched_heads(d.top(), d.geometry, d.seed, d.exclude)


def _draw_image_matched(d: Draw) -> list[HeadRef]:
    d.top()  # the heads file and k, checked as every ranked kind checks them
    return image_matched_heads(d.ranking(), d.heads_file.image_mass(), d.geometry, d.k, d.seed,
                               d.options.get("tolerance", IMAGE_MATCH_TOLERANCE), d.exclude)


def _read_explicit(text: str) -> tuple[int, dict[str, Any]]:
    heads = tuple(explicit_heads(text, usage()))
    return len(heads), {"heads": heads}


def _tolerance(tolerance: float | None) -> str:
    return "" if tolerance is None else f"~{tolerance:g}"


# Fields that do not apply to a kind that is no control (its report names, how a plan asks for it) or no variant.
_NOT_A_CONTROL = dict(label=None, legend=None, column=None, optional_column=False, plan_flag=None, option=None,
                      option_help=None)
_NOT_A_VARIANT = dict(draws_as=None, pool=None)

# The table, in report order (baseline, claims, controls, scorer comparisons).
KINDS: tuple[Kind, ...] = (
    Kind(name="baseline",
         spec=SpecForm(usage="none", patterns=("none", ""), read=None, write=lambda k, **o: "none", canonical=True),
         draw=lambda d: [], needs_file=False, control=False, claim=False, id_prefix=None, heads_text=None,
         colour="0.3", **_NOT_A_CONTROL, **_NOT_A_VARIANT),
    Kind(name="topk",
         spec=SpecForm(usage="top<K>", patterns=(r"top(?P<k>\d+)",), read=None, write=lambda k, **o: f"top{k}",
                       canonical=False),
         draw=lambda d: d.top(), needs_file=True, control=False, claim=True, id_prefix="top", heads_text=None,
         colour="tab:red", **_NOT_A_CONTROL, **_NOT_A_VARIANT),
    Kind(name="explicit",
         spec=SpecForm(usage="heads like L12H3;L14H0", patterns=(), read=_read_explicit,
                       write=lambda k, heads=(), **o: ";".join(map(str, heads)), canonical=False),
         draw=lambda d: list(d.options["heads"]), needs_file=False, control=False, claim=True, id_prefix=None,
         heads_text="heads {config_id}", colour="tab:purple", **_NOT_A_CONTROL, **_NOT_A_VARIANT),
    Kind(name="random",
         spec=SpecForm(usage="random<K>, random<K>:skip_layer0",
                       patterns=(r"random(?P<k>\d+)(?P<skip_layer0>:skip_layer0)?",), read=None,
                       write=lambda k, skip_layer0=False, **o: f"random{k}" + (":skip_layer0" if skip_layer0 else ""),
                       canonical=False),
         draw=_draw_random, needs_file=False, control=True, claim=False, id_prefix="random",
         label="random", legend="random-k", column="Random", optional_column=False,
         heads_text="{k} random heads (seed {seed})", colour="tab:blue",
         plan_flag="random", option=None, option_help=None, **_NOT_A_VARIANT),
    Kind(name="random_all",
         spec=None, draw=None, needs_file=False, control=True, claim=False, id_prefix="random_all",
         label="uniform random (all heads)", legend="uniform random-k (all heads)",
         column="Uniform random (all heads)", optional_column=True, heads_text=None, colour="tab:cyan",
         plan_flag="uniform_random", option=None, option_help=None, draws_as="random", pool=ALL),
    Kind(name="random_outside",
         spec=SpecForm(usage="random_outside:top<K>",
                       patterns=(r"random_outside[:=]top(?P<k>\d+)", r"random_outside(?P<k>\d+)"), read=None,
                       write=lambda k, **o: f"random_outside:top{k}", canonical=False),
         draw=_draw_outside, needs_file=True, control=True, claim=False, id_prefix="random_outside",
         label="random outside the top-k", legend="random-k outside the top-k", column="Random outside the top-k",
         optional_column=True, heads_text=None, colour="tab:brown",
         plan_flag=None, option="random-outside",
         option_help="k heads drawn at random outside the top k, the paper's control for its extra models",
         **_NOT_A_VARIANT),
    Kind(name="layer_matched",
         spec=SpecForm(usage="like:top<K>",
                       patterns=(r"(?:like|random_like|random-like)[:=]top(?P<k>\d+)", r"layer_matched(?P<k>\d+)"),
                       read=None, write=lambda k, **o: f"like:top{k}", canonical=False),
         draw=_draw_layer_matched, needs_file=True, control=True, claim=False, id_prefix="layer_matched",
         label="layer-matched random", legend="layer-matched random-k", column="Layer-matched",
         optional_column=False, heads_text="{k} layer-matched random heads (seed {seed})", colour="tab:green",
         plan_flag="layer_matched", option=None, option_help=None, **_NOT_A_VARIANT),
    Kind(name="image_matched",
         spec=SpecForm(usage="image_matched:top<K>",
                       patterns=(r"image_matched[:=]top(?P<k>\d+)(?:~(?P<tolerance>\d*\.?\d+))?",
                                 r"image_matched(?P<k>\d+)(?:~(?P<tolerance>\d*\.?\d+))?"), read=None,
                       write=lambda k, tolerance=None, **o: f"image_matched:top{k}" + _tolerance(tolerance),
                       canonical=False),
         draw=_draw_image_matched, needs_file=True, control=True, claim=False, id_prefix="image_matched",
         label="image-matched", legend="image-matched", column="Image-matched", optional_column=True,
         heads_text="{k} image-matched heads (seed {seed})", colour="tab:olive",
         plan_flag=None, option="image-matched",
         option_help="heads outside the top 2k whose attention mass on the image matches each top head's; needs a "
                     "heads file with image_mass", **_NOT_A_VARIANT),
    Kind(name="scorer_topk",
         spec=None, draw=None, needs_file=True, control=False, claim=False, id_prefix=None, heads_text=None,
         colour=None, **_NOT_A_CONTROL, draws_as="topk", pool=None),
)
BY_NAME: dict[str, Kind] = {k.name: k for k in KINDS}
NAMES = tuple(BY_NAME)  # every configuration kind a run folder may record
CONTROLS = tuple(k.name for k in KINDS if k.control)  # in report order
CLAIMS = tuple(k.name for k in KINDS if k.claim)
# --control value -> kind, alphabetically
OPTIONS: dict[str, Kind] = {k.option: k for k in sorted((k for k in KINDS if k.option), key=lambda k: k.option)}
KIND_FIELDS = tuple(f.name for f in fields(Kind))


def check_table(table: Sequence[Kind]) -> None:
    """Names, id prefixes and --control values are unique; a variant names a kind with a spec; exactly one kind
    reads what no pattern matches (explicit heads)."""
    for attr in ("name", "id_prefix", "option"):
        values = [getattr(k, attr) for k in table if getattr(k, attr)]
        if len(set(values)) != len(values):
            raise VRHError(f"head-set kinds: {attr} {sorted(v for v in values if values.count(v) > 1)[0]!r} twice")
    names = {k.name: k for k in table}
    for k in table:
        if k.draws_as and (k.draws_as not in names or names[k.draws_as].spec is None):
            raise VRHError(f"head-set kind {k.name!r}: draws_as {k.draws_as!r} is no kind with a spec")
    if sum(1 for k in table if k.spec and k.spec.read) != 1:
        raise VRHError("head-set kinds: exactly one kind may read specs no pattern matches")


check_table(KINDS)


def kind(name: str) -> Kind:
    try:
        return BY_NAME[name]
    except KeyError:
        raise VRHError(f"head-set kind {name!r}: use one of {', '.join(NAMES)}") from None


def order(name: str) -> int:
    """Report order of a configuration kind; unknown kinds last."""
    return BY_NAME[name].order if name in BY_NAME else len(KINDS)


def usage() -> str:
    """The spec forms, as an error message lists them: `none, top<K>, ... or heads like L12H3;L14H0`."""
    typed = [k.spec for k in KINDS if k.spec]
    return ", ".join(s.usage for s in typed if not s.read) + " or " + next(s.usage for s in typed if s.read)


def check_pool(pool: str, where: str = "control pool") -> str:
    if pool not in POOLS:
        raise VRHError(f"{where} {pool!r}: use one of {', '.join(POOLS)}")
    return pool


def split_pool(spec: str | None) -> tuple[str, str | None]:
    """`random5@all` -> (`random5`, `all`); a spec without a pool suffix -> (spec, None); None -> `none`."""
    text = (spec or "none").strip()
    if m := re.fullmatch(rf"(?P<spec>.+?)@(?P<pool>{'|'.join(POOLS)})", text, re.IGNORECASE):
        return m.group("spec").strip(), m.group("pool").lower()
    return text, None


def match_form(text: str) -> ParsedSpec | None:
    """The kind whose pattern `text` (without a pool suffix) matches; None for explicit heads or a typo."""
    for k in KINDS:
        if k.spec and (found := k.spec.match(text)):
            return ParsedSpec(k, found[0], found[1], None, text)
    return None


def parse_spec(spec: str | None) -> ParsedSpec:
    """A spec string -> its kind, k, options and pool suffix; explicit heads are read (each bad token named)."""
    text, pool = split_pool(spec)
    if parsed := match_form(text):
        return ParsedSpec(parsed.kind, parsed.k, parsed.options, pool, text)
    reader = next(k for k in KINDS if k.spec and k.spec.read)
    k, options = reader.spec.read(text)
    return ParsedSpec(reader, k, options, pool, text)


def format_spec(kind_: Kind | str, k: int, **options: Any) -> str:
    """The spec a plan writes for `kind_` at k (`tolerance`, `skip_layer0`, `heads` where the kind takes them); a
    variant writes its base's plain spec with its own pool as the suffix (random_all: `random5@all`)."""
    found = kind(kind_) if isinstance(kind_, str) else kind_
    text = found.base.spec.write(k, **({} if found.draws_as else options))
    return f"{text}@{found.pool}" if found.pool else text


def planned_controls(flags: Mapping[str, bool], options: Sequence[str]) -> list[Kind]:
    """The control kinds a sweep plans per k and seed: those whose `plan_flag` is set in `flags`, in table order,
    then each --control value in the order given (refused, with the choices, when unknown)."""
    unknown = [o for o in options if o not in OPTIONS]
    if unknown:
        raise VRHError(f"--control {unknown[0]!r}: use {', '.join(OPTIONS)}")
    return [k for k in KINDS if k.plan_flag and flags.get(k.plan_flag)] + [OPTIONS[o] for o in options]


def id_pattern() -> re.Pattern[str]:
    """A configuration id of a kind with an id prefix: `layer_matched5_s3_mean` -> kind, k, seed, mode groups."""
    prefixes = sorted((k.id_prefix for k in KINDS if k.id_prefix), key=len, reverse=True)
    return re.compile(rf"^(?P<kind>{'|'.join(prefixes)})(?P<k>\d+)(?:_s(?P<seed>\d+))?(?:_(?P<mode>[a-z_]+))?$")
