"""Head ablation on a language decoder: zero (or mean) each chosen head's output slice before o_proj.

(The uniform modes, `uniform` and `uniform_image`, instead make the heads' answer rows attend uniformly:
vrh_lmms.model.interventions.uniform; `Ablator` applies them too, `RowAblator` refuses them.)

The default method folds the ablation into o_proj's weights: zeroing head h's input columns (its per-head view,
vrh_lmms.model.head_view) equals zeroing
that head's output, and a mean replacement adds W[:, slice] @ mean to the bias. That costs nothing at run time and
works with any engine that reads the weights. Where weights cannot be edited (quantized, offloaded, meta), a hook
on the decoder's named per-head output site (`layers.L.head_out`, vrh_lmms.model.backbone) edits o_proj's input instead.
Either way the original weights come back exactly on restore.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

from vrh_lmms.base.atomic import save_safetensors
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.geometry import Geometry, HeadRef
from vrh_lmms.base.heads.plan import MODES, UNIFORM_MODES
from vrh_lmms.base.heads.spec import HeadSet
from vrh_lmms.model.backbone import HEAD_OUT, Decoder, Hook, Installed, locate_decoder, site_name
from vrh_lmms.model.head_view import per_head

# MODES: zero / mean fold into o_proj; UNIFORM_MODES replace answer-row attention (model.interventions.uniform);
# their names are declared with the configurations that carry them (vrh_lmms.base.heads.plan)
METHODS = ("auto", "fold", "hook")


def _heads_of(heads: HeadSet | Iterable[HeadRef]) -> list[HeadRef]:
    return list(heads.heads) if isinstance(heads, HeadSet) else list(heads)


def foldable(proj: nn.Module) -> bool:
    """Weights we may edit in place: a dense floating-point matrix that lives in memory."""
    weight = getattr(proj, "weight", None)
    if not isinstance(proj, nn.Linear) or weight is None:
        return False
    if weight.device.type == "meta" or not weight.dtype.is_floating_point:
        return False
    hook = getattr(proj, "_hf_hook", None)
    return not (hook is not None and getattr(hook, "offload", False))


def check_method(method: str) -> str:
    if method not in METHODS:
        raise VRHError(f"ablation method {method!r} unknown; use one of {', '.join(METHODS)}")
    return method


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise VRHError(f"ablation mode {mode!r} unknown; use one of {', '.join(MODES)}")
    return mode


def resolve_method(decoder: Decoder, requested: str) -> str:
    """`fold` when every o_proj is a dense in-memory float matrix (or as asked), else `hook`."""
    if requested != "auto":
        if requested == "fold" and not all(foldable(p) for p in _projections(decoder)):
            raise VRHError("ablation method 'fold' impossible: some o_proj weights are quantized, offloaded or "
                           "on the meta device; use method 'hook' or 'auto'")
        return requested
    return "fold" if all(foldable(p) for p in _projections(decoder)) else "hook"


def _projections(decoder: Decoder) -> list[nn.Module]:
    """The output projections of the layers that have heads."""
    return [decoder.out_projs[layer] for layer in decoder.geometry.attention_layers]


def means_shape(g: Geometry) -> tuple[int, int, int]:
    """Shape of a means array: (layers, heads, widest head). A layer whose heads are narrower uses the first
    dim(layer) entries of its rows (zeros after them); a layer without heads is all zeros. For a uniform decoder
    this is (layers, heads, head_dim), as means files always were."""
    return g.layers, g.heads, g.max_head_dim


def check_means(g: Geometry, means: torch.Tensor | None) -> torch.Tensor:
    if means is None:
        raise VRHError("ablation mode 'mean' needs per-head mean activations (a means file from "
                       "`vrh-lmms discover`, model arg means_file=PATH)")
    if tuple(means.shape) != means_shape(g):
        raise VRHError(f"means have shape {tuple(means.shape)}, the model needs {means_shape(g)}")
    return means


@torch.no_grad()
def folded_bias(proj: nn.Module, layer: int, heads: Iterable[int], head_dim: int, means: torch.Tensor) -> torch.Tensor:
    """o_proj's bias once these heads' outputs are replaced by their means: b + sum_h W[:, slice_h] @ mean_h.

    The one computation of the mean shift, shared by the fold and by per-row packing, so both add the very same
    bias (computed in float32, stored in the weight's dtype)."""
    w = proj.weight
    shift = torch.zeros(w.shape[0], dtype=torch.float32, device=w.device)
    for h in heads:
        shift += per_head(w, head_dim)[:, h].float() @ means[layer, h, :head_dim].to(device=w.device,
                                                                                       dtype=torch.float32)
    if proj.bias is None:
        return shift.to(w.dtype)
    return (proj.bias.float() + shift).to(proj.bias.dtype)


@dataclass
class _Saved:
    layer: int
    columns: dict[int, torch.Tensor]  # head -> original W[:, slice]
    bias: torch.Tensor | None
    had_bias: bool


class Ablator:
    """Applies one head set at a time to a model and restores the pristine weights exactly.

    Swapping head sets (`apply` again) restores first, so a sweep can load a model once and walk through every
    configuration.
    """

    def __init__(self, model: nn.Module, decoder: Decoder | None = None, method: str = "auto") -> None:
        self.model = model
        self.decoder = decoder or locate_decoder(model)
        self.requested_method = check_method(method)
        self._uniform = None  # vrh_lmms.model.interventions.uniform.UniformAblation while a uniform mode is applied
        self._saved: list[_Saved] = []
        self._hooks: Installed | None = None
        self.active: list[HeadRef] = []
        self.mode: str | None = None
        self.method: str | None = None

    @property
    def geometry(self) -> Geometry:
        return self.decoder.geometry

    def resolve_method(self) -> str:
        return resolve_method(self.decoder, self.requested_method)

    def apply(self, heads: HeadSet | Iterable[HeadRef], mode: str = "zero", means: torch.Tensor | None = None) -> None:
        """Ablate exactly these heads (replacing any previous set)."""
        check_mode(mode)
        heads = _heads_of(heads)
        for h in heads:
            self.geometry.check(h)
        if mode == "mean":
            means = self._check_means(means)
        self.restore()
        if not heads:
            return
        if mode in UNIFORM_MODES:  # not a weight edit: answer rows attend uniformly (registered attention path)
            # deferred: keeps `vrh-lmms export-masked --help` free of transformers
            from vrh_lmms.model.interventions.uniform import UNIFORM_OVER as OVER
            from vrh_lmms.model.interventions.uniform import UniformAblation

            self._uniform = UniformAblation(self.model, heads, over=OVER[mode])
            self.active, self.mode, self.method = sorted(heads), mode, "attention"
            return
        method = self.resolve_method()
        by_layer: dict[int, list[int]] = {}
        for h in heads:
            by_layer.setdefault(h.layer, []).append(h.head)
        if method == "fold":
            self._fold(by_layer, mode, means)
        else:
            self._hook(by_layer, mode, means)
        self.active, self.mode, self.method = sorted(heads), mode, method

    def _check_means(self, means: torch.Tensor | None) -> torch.Tensor:
        return check_means(self.geometry, means)

    @torch.no_grad()
    def _fold(self, by_layer: dict[int, list[int]], mode: str, means: torch.Tensor | None) -> None:
        for layer, heads in by_layer.items():
            proj, d = self.decoder.out_projs[layer], self.geometry.dim(layer)
            w = per_head(proj.weight, d)
            saved = _Saved(layer, {}, proj.bias.detach().clone() if proj.bias is not None else None,
                           proj.bias is not None)
            self._saved.append(saved)
            bias = folded_bias(proj, layer, heads, d, means) if mode == "mean" else None
            for h in heads:
                saved.columns[h] = w[:, h].detach().clone()
                w[:, h] = 0
            if bias is not None:
                if proj.bias is None:
                    proj.bias = nn.Parameter(bias, requires_grad=False)
                else:
                    proj.bias.copy_(bias)

    def _hook(self, by_layer: dict[int, list[int]], mode: str, means: torch.Tensor | None) -> None:
        hooks = []
        for layer, heads in by_layer.items():
            d = self.geometry.dim(layer)
            fill = [means[layer, h, :d] for h in heads] if mode == "mean" else None

            def edit(x, heads=heads, fill=fill, d=d):
                x = x.clone()
                view = per_head(x, d)
                for i, h in enumerate(heads):
                    view[..., h, :] = 0 if fill is None else fill[i].to(device=x.device, dtype=x.dtype)
                return x

            hooks.append(Hook(site_name(layer, HEAD_OUT), edit))
        self._hooks = self.decoder.install(hooks)

    @torch.no_grad()
    def restore(self) -> None:
        """Put back every edited column and bias, remove every hook."""
        for saved in reversed(self._saved):
            proj, d = self.decoder.out_projs[saved.layer], self.geometry.dim(saved.layer)
            for h, cols in saved.columns.items():
                per_head(proj.weight, d)[:, h] = cols
            if saved.had_bias:
                proj.bias.copy_(saved.bias)
            else:
                proj.bias = None
        self._saved.clear()
        if self._uniform is not None:
            self._uniform.remove()
            self._uniform = None
        if self._hooks is not None:
            self._hooks.remove()
            self._hooks = None
        self.active, self.mode, self.method = [], None, None


@dataclass(frozen=True)
class RowConfig:
    """One configuration of a packed batch: the heads its rows ablate, and how."""

    heads: tuple[HeadRef, ...]
    mode: str = "zero"  # ignored when no head is ablated


@dataclass
class _LayerRows:
    """Per-configuration edits of one layer's o_proj: which input columns stay, what bias (or input fill) applies."""

    keep: torch.Tensor  # (configs, in_features), 1 = keep, 0 = ablated
    bias: torch.Tensor | None  # (configs, out_features): fold arithmetic with a mean row; else o_proj's own bias
    fill: torch.Tensor | None  # (configs, in_features): hook arithmetic with a mean row


class RowAblator:
    """Each batch row ablates its own head set: one forward carries several configurations side by side.

    Row r of a batch belongs to configuration `rows[r]` (`set_rows`), or every row to one configuration (`solo`).
    Only the o_proj of layers that some configuration touches is replaced, and it reproduces, row by row, the
    arithmetic `Ablator` would use for that configuration alone: with method `fold` the ablated input columns are
    multiplied by 0 (the same zero products as zeroed weight columns) and the folded mean bias is added through the
    same `addmm` the folded Linear runs; with method `hook` the input slice is zeroed or set to the mean before the
    original forward. So a packed row gives the answer the configuration gives alone, up to batch-size effects of
    the kernels. The weights are never edited.
    """

    def __init__(self, decoder: Decoder, configs: Sequence[RowConfig], means: torch.Tensor | None = None,
                 method: str = "auto") -> None:
        if not configs:
            raise VRHError("a packed batch needs at least one configuration")
        self.decoder = decoder
        self.configs = list(configs)
        for cfg in self.configs:
            if cfg.heads:
                check_mode(cfg.mode)
                if cfg.mode in UNIFORM_MODES:  # an attention edit: no per-row o_proj arithmetic reproduces it
                    raise VRHError(f"ablation mode {cfg.mode!r} edits attention, not o_proj, so it cannot share a "
                                   "packed batch; run it alone (--pack 1)")
            for h in cfg.heads:
                self.geometry.check(h)
        if any(cfg.heads and cfg.mode == "mean" for cfg in self.configs):
            means = check_means(self.geometry, means)
        self.method = resolve_method(decoder, check_method(method))
        self._layers = {layer: self._plan_layer(layer, means) for layer in self._touched_layers()}
        self._rows: tuple[int, ...] | None = None
        self._solo = 0
        self._row_cache: dict[tuple[int, ...], dict[int, tuple]] = {}
        self._spread: dict[int, torch.Tensor] = {}  # layer -> rows to copy the o_proj input to (`spread_next`)
        self._installed: Installed | None = None

    @property
    def geometry(self) -> Geometry:
        return self.decoder.geometry

    @property
    def lowest_layer(self) -> int | None:
        """The first layer any configuration ablates (rows agree below it)."""
        return min(self._layers) if self._layers else None

    def _touched_layers(self) -> list[int]:
        return sorted({h.layer for cfg in self.configs for h in cfg.heads})

    @torch.no_grad()
    def _plan_layer(self, layer: int, means: torch.Tensor | None) -> _LayerRows:
        proj, d = self.decoder.out_projs[layer], self.geometry.dim(layer)
        weight = getattr(proj, "weight", None)
        floating = weight is not None and weight.dtype.is_floating_point and weight.device.type != "meta"
        dtype = weight.dtype if floating else torch.float32
        device = weight.device if floating else torch.device("cpu")
        keep = torch.ones(len(self.configs), self.geometry.heads * d, dtype=dtype, device=device)
        fill = torch.zeros_like(keep)
        mean_heads: list[list[int]] = []
        keep_heads, fill_heads = per_head(keep, d), per_head(fill, d)
        for c, cfg in enumerate(self.configs):
            heads = [h.head for h in cfg.heads if h.layer == layer]
            for h in heads:
                keep_heads[c, h] = 0
                if cfg.mode == "mean":
                    fill_heads[c, h] = means[layer, h, :d].to(device=device, dtype=dtype)
            mean_heads.append(heads if cfg.mode == "mean" else [])
        if not any(mean_heads):
            return _LayerRows(keep, None, None)
        if self.method == "hook":
            return _LayerRows(keep, None, fill)
        # fold: per row, the bias the folded Linear of that configuration would carry
        out = proj.weight.shape[0]
        original = proj.bias.detach() if proj.bias is not None else torch.zeros(out, dtype=dtype, device=device)
        bias = torch.stack([folded_bias(proj, layer, heads, d, means) if heads else original
                            for heads in mean_heads])
        return _LayerRows(keep, bias, None)

    # ----------------------------------------------------------------------------------------- row layout
    def set_rows(self, rows: Sequence[int] | None) -> None:
        """Row r of the next forwards belongs to configuration rows[r]; None: every row to the `solo` one."""
        if rows is not None:
            bad = [r for r in rows if not 0 <= r < len(self.configs)]
            if bad:
                raise VRHError(f"row configuration {bad[0]} outside 0..{len(self.configs) - 1}")
            rows = tuple(int(r) for r in rows)
        self._rows = rows

    def row_layout(self) -> tuple[int, ...] | None:
        """The configuration of each row of the next forwards (None: every row is the `solo` one's)."""
        return self._rows

    def spread_next(self, layer: int, index: torch.Tensor | None) -> torch.Tensor | None:
        """The next o_proj input of `layer` first becomes its rows `index` (a shared attention row copied to the
        configurations that ablate a head there: vrh_lmms.model.shared_prefill); None clears it. Returns the index
        that was pending and not yet used."""
        left = self._spread.pop(layer, None)
        if index is not None:
            self._spread[layer] = index
        return left

    def solo(self, config: int) -> None:
        """Every row of the next forwards (whatever the batch size) runs this one configuration."""
        if not 0 <= config < len(self.configs):
            raise VRHError(f"configuration {config} outside 0..{len(self.configs) - 1}")
        self._rows, self._solo = None, int(config)

    def _row_tensors(self, layer: int, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(keep, bias, fill) for each row of `x`, shaped to broadcast over its middle axes (None where unused)."""
        n_rows = x.shape[0]
        if self._rows is None:
            rows = (self._solo,) * n_rows
        elif len(self._rows) != n_rows:
            raise VRHError(f"packed forward got {n_rows} rows, the row layout names {len(self._rows)}")
        else:
            rows = self._rows
        per_layer = self._row_cache.setdefault((rows, x.dim(), x.dtype, x.device), {})
        if layer not in per_layer:
            plan = self._layers[layer]
            index = torch.tensor(rows, device=plan.keep.device)
            middle = [1] * (x.dim() - 2)

            def pick(t: torch.Tensor | None, dtype: torch.dtype | None = None) -> torch.Tensor | None:
                if t is None:
                    return None
                t = t.index_select(0, index).to(device=x.device, dtype=dtype or t.dtype)
                return t.view(n_rows, *middle, t.shape[-1])

            per_layer[layer] = (pick(plan.keep, x.dtype), pick(plan.bias), pick(plan.fill, x.dtype))
            while len(self._row_cache) > 64:  # one layout per batch shape; keep the cache small
                self._row_cache.pop(next(iter(self._row_cache)))
        return per_layer[layer]

    # ---------------------------------------------------------------------------------------- install
    def _make_forward(self, layer: int, proj: nn.Module):
        """The `forward` hook of layer's head_out site: fold arithmetic on the projection's own weights, or the
        input edit before the projection that ran before (`original`)."""

        def spread(x: torch.Tensor) -> torch.Tensor:
            index = self._spread.pop(layer, None)
            return x if index is None else x.index_select(0, index.to(x.device))

        def fold_forward(x: torch.Tensor, original) -> torch.Tensor:
            x = spread(x)
            keep, bias, _ = self._row_tensors(layer, x)
            x = x * keep
            if bias is None:
                return nn.functional.linear(x, proj.weight, proj.bias)
            full = bias.expand(*x.shape[:-1], bias.shape[-1]).reshape(-1, bias.shape[-1])
            out = torch.addmm(full, x.reshape(-1, x.shape[-1]), proj.weight.t())
            return out.view(*x.shape[:-1], bias.shape[-1])

        def hook_forward(x: torch.Tensor, original, *args, **kwargs):
            x = spread(x)
            keep, _, fill = self._row_tensors(layer, x)
            x = x * keep if fill is None else x * keep + fill
            return original(x, *args, **kwargs)

        return fold_forward if self.method == "fold" else hook_forward

    def install(self) -> RowAblator:
        self.uninstall()
        self._installed = self.decoder.install([
            Hook(site_name(layer, HEAD_OUT), self._make_forward(layer, self.decoder.out_projs[layer]), "forward")
            for layer in self._layers])
        return self

    def uninstall(self) -> None:
        if self._installed is not None:
            self._installed.remove()
            self._installed = None
        self._row_cache.clear()
        self._spread.clear()

    def __enter__(self) -> RowAblator:
        return self.install()

    def __exit__(self, *exc) -> None:
        self.uninstall()


@contextlib.contextmanager
def ablated(model: nn.Module, heads: HeadSet | Sequence[HeadRef], mode: str = "zero",
            means: torch.Tensor | None = None, method: str = "auto",
            decoder: Decoder | None = None) -> Iterator[Ablator]:
    """Scoped ablation: the original weights come back when the block ends, also on exceptions. `decoder`: the
    model's located decoder (default: located here)."""
    ablator = Ablator(model, decoder, method=method)
    try:
        ablator.apply(heads, mode=mode, means=means)
        yield ablator
    finally:
        ablator.restore()


class HeadMeanCollector:
    """Accumulates each head's mean output (the o_proj input slice) over reference inputs, for mean ablation."""

    def __init__(self, model: nn.Module, decoder: Decoder | None = None) -> None:
        self.decoder = decoder or locate_decoder(model)
        g = self.decoder.geometry
        # (layers, heads * widest head): a layer's o_proj input fills its first heads * dim(layer) entries
        self.sums = torch.zeros(g.layers, g.heads * g.max_head_dim, dtype=torch.float64)
        self.count = 0
        self.token_mask: torch.Tensor | None = None  # (batch, seq) bool: which positions count
        self._installed: Installed | None = None

    def __enter__(self) -> HeadMeanCollector:
        self._installed = self.decoder.install([Hook(site_name(layer, HEAD_OUT), self._make_hook(layer))
                                                for layer in self.decoder.geometry.attention_layers])
        return self

    def __exit__(self, *exc) -> None:
        if self._installed is not None:
            self._installed.remove()
            self._installed = None

    def _make_hook(self, layer: int):
        def hook(x):
            x = x.detach().to(torch.float64)
            if self.token_mask is not None and self.token_mask.shape == x.shape[:2]:
                x = x[self.token_mask.to(x.device)]
            else:
                x = x.reshape(-1, x.shape[-1])
            self.sums[layer, :x.shape[-1]] += x.sum(0).cpu()
            if layer == self.decoder.geometry.attention_layers[0]:
                self.count += x.shape[0]

        return hook

    def means(self) -> torch.Tensor:
        if self.count == 0:
            raise VRHError("no tokens were seen; cannot compute head means")
        g = self.decoder.geometry
        return padded_means((self.sums / self.count).to(torch.float32), g)


def padded_means(flat: torch.Tensor, g: Geometry) -> torch.Tensor:
    """(layers, heads * widest head) sums or means, each layer's o_proj input first, as `means_shape(g)`: head h of
    layer L at [L, h, :dim(L)] (the columns h*dim(L) .. (h+1)*dim(L) of that layer's input), zeros after."""
    if g.layer_head_dims is None:
        return flat.reshape(means_shape(g))
    out = torch.zeros(means_shape(g), dtype=flat.dtype)
    for layer in g.attention_layers:
        d = g.dim(layer)
        out[layer, :, :d] = per_head(flat[layer, :g.heads * d], d)
    return out


def save_means(means: torch.Tensor, path: str | Path, geometry: Geometry, count: int) -> Path:
    meta = {k: str(v) for k, v in geometry.to_dict().items()}
    meta["tokens"] = str(count)
    return save_safetensors({"means": means.contiguous()}, path, metadata=meta)


def load_means(path: str | Path) -> torch.Tensor:
    path = Path(path)
    if not path.is_file():
        raise VRHError(f"means file {path} does not exist")
    with safe_open(str(path), framework="pt") as f:
        if "means" not in f.keys():
            raise VRHError(f"means file {path} has no tensor 'means'")
        return f.get_tensor("means")


def means_path_for(heads_file: str | Path) -> Path:
    """Where discovery writes the head means that go with a heads file."""
    p = Path(heads_file)
    return p.with_name(p.stem + ".means.safetensors")
