"""Head ablation on a language decoder: zero (or mean) each chosen head's output slice before o_proj.

The default method folds the ablation into o_proj's weights: zeroing input columns [h*d:(h+1)*d] equals zeroing
that head's output, and a mean replacement adds W[:, slice] @ mean to the bias. That costs nothing at run time and
works with any engine that reads the weights. Where weights cannot be edited (quantized, offloaded, meta), a
forward-pre-hook edits o_proj's input instead. Either way the original weights come back exactly on restore.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from vrh_lmms.backbone import Decoder, locate_decoder
from vrh_lmms.errors import VRHError
from vrh_lmms.heads.geometry import Geometry, HeadRef
from vrh_lmms.heads.spec import HeadSet

# zero / mean fold into o_proj; the uniform modes replace answer-row attention (vrh_lmms.interventions.uniform)
UNIFORM_MODES = ("uniform", "uniform_image")
MODES = ("zero", "mean", *UNIFORM_MODES)
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
        if method not in METHODS:
            raise VRHError(f"ablation method {method!r} unknown; use one of {', '.join(METHODS)}")
        self.model = model
        self.decoder = decoder or locate_decoder(model)
        self.requested_method = method
        self._uniform = None  # vrh_lmms.interventions.uniform.UniformAblation while a uniform mode is applied
        self._saved: list[_Saved] = []
        self._hooks: list[torch.utils.hooks.RemovableHandle] = []
        self.active: list[HeadRef] = []
        self.mode: str | None = None
        self.method: str | None = None

    @property
    def geometry(self) -> Geometry:
        return self.decoder.geometry

    def resolve_method(self) -> str:
        if self.requested_method != "auto":
            if self.requested_method == "fold" and not all(foldable(p) for p in self.decoder.out_projs):
                raise VRHError("ablation method 'fold' impossible: some o_proj weights are quantized, offloaded or "
                               "on the meta device; use method 'hook' or 'auto'")
            return self.requested_method
        return "fold" if all(foldable(p) for p in self.decoder.out_projs) else "hook"

    def apply(self, heads: HeadSet | Iterable[HeadRef], mode: str = "zero", means: torch.Tensor | None = None) -> None:
        """Ablate exactly these heads (replacing any previous set)."""
        if mode not in MODES:
            raise VRHError(f"ablation mode {mode!r} unknown; use one of {', '.join(MODES)}")
        heads = _heads_of(heads)
        for h in heads:
            self.geometry.check(h)
        if mode == "mean":
            means = self._check_means(means)
        self.restore()
        if not heads:
            return
        if mode in UNIFORM_MODES:  # not a weight edit: answer rows attend uniformly (registered attention path)
            from vrh_lmms.interventions.uniform import MODES as OVER
            from vrh_lmms.interventions.uniform import UniformAblation

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
        g = self.geometry
        if means is None:
            raise VRHError("ablation mode 'mean' needs per-head mean activations (a means file from "
                           "`vrh-lmms discover`, model arg means_file=PATH)")
        if tuple(means.shape) != (g.layers, g.heads, g.head_dim):
            raise VRHError(f"means have shape {tuple(means.shape)}, the model needs "
                           f"({g.layers}, {g.heads}, {g.head_dim})")
        return means

    @torch.no_grad()
    def _fold(self, by_layer: dict[int, list[int]], mode: str, means: torch.Tensor | None) -> None:
        d = self.geometry.head_dim
        for layer, heads in by_layer.items():
            proj = self.decoder.out_projs[layer]
            w = proj.weight
            saved = _Saved(layer, {}, proj.bias.detach().clone() if proj.bias is not None else None,
                           proj.bias is not None)
            self._saved.append(saved)
            shift = torch.zeros(w.shape[0], dtype=torch.float32, device=w.device)
            for h in heads:
                sl = slice(h * d, (h + 1) * d)
                saved.columns[h] = w[:, sl].detach().clone()
                if mode == "mean":
                    shift += w[:, sl].float() @ means[layer, h].to(device=w.device, dtype=torch.float32)
                w[:, sl] = 0
            if mode == "mean":
                if proj.bias is None:
                    proj.bias = nn.Parameter(shift.to(w.dtype), requires_grad=False)
                else:
                    proj.bias.copy_((proj.bias.float() + shift).to(proj.bias.dtype))

    def _hook(self, by_layer: dict[int, list[int]], mode: str, means: torch.Tensor | None) -> None:
        d = self.geometry.head_dim
        for layer, heads in by_layer.items():
            slices = [slice(h * d, (h + 1) * d) for h in heads]
            fill = [means[layer, h] for h in heads] if mode == "mean" else None

            def pre_hook(module, args, slices=slices, fill=fill):
                x = args[0].clone()
                for i, sl in enumerate(slices):
                    x[..., sl] = 0 if fill is None else fill[i].to(device=x.device, dtype=x.dtype)
                return (x, *args[1:])

            self._hooks.append(self.decoder.out_projs[layer].register_forward_pre_hook(pre_hook))

    @torch.no_grad()
    def restore(self) -> None:
        """Put back every edited column and bias, remove every hook."""
        d = self.geometry.head_dim
        for saved in reversed(self._saved):
            proj = self.decoder.out_projs[saved.layer]
            for h, cols in saved.columns.items():
                proj.weight[:, h * d:(h + 1) * d] = cols
            if saved.had_bias:
                proj.bias.copy_(saved.bias)
            else:
                proj.bias = None
        self._saved.clear()
        if self._uniform is not None:
            self._uniform.remove()
            self._uniform = None
        for handle in self._hooks:
            handle.remove()
        self._hooks.clear()
        self.active, self.mode, self.method = [], None, None


@contextlib.contextmanager
def ablated(model: nn.Module, heads: HeadSet | Sequence[HeadRef], mode: str = "zero",
            means: torch.Tensor | None = None, method: str = "auto") -> Iterator[Ablator]:
    """Scoped ablation: the original weights come back when the block ends, also on exceptions."""
    ablator = Ablator(model, method=method)
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
        self.sums = torch.zeros(g.layers, g.heads * g.head_dim, dtype=torch.float64)
        self.count = 0
        self.token_mask: torch.Tensor | None = None  # (batch, seq) bool: which positions count
        self._handles = []

    def __enter__(self) -> HeadMeanCollector:
        for layer, proj in enumerate(self.decoder.out_projs):
            self._handles.append(proj.register_forward_pre_hook(self._make_hook(layer)))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _make_hook(self, layer: int):
        def hook(module, args):
            x = args[0].detach().to(torch.float64)
            if self.token_mask is not None and self.token_mask.shape == x.shape[:2]:
                x = x[self.token_mask.to(x.device)]
            else:
                x = x.reshape(-1, x.shape[-1])
            self.sums[layer] += x.sum(0).cpu()
            if layer == 0:
                self.count += x.shape[0]

        return hook

    def means(self) -> torch.Tensor:
        if self.count == 0:
            raise VRHError("no tokens were seen; cannot compute head means")
        g = self.decoder.geometry
        return (self.sums / self.count).to(torch.float32).reshape(g.layers, g.heads, g.head_dim)


def save_means(means: torch.Tensor, path: str | Path, geometry: Geometry, count: int) -> Path:
    from safetensors.torch import save_file

    path = Path(path)
    meta = {k: str(v) for k, v in geometry.to_dict().items()}
    meta["tokens"] = str(count)
    save_file({"means": means.contiguous()}, str(path), metadata=meta)
    return path


def load_means(path: str | Path) -> torch.Tensor:
    from safetensors import safe_open

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
