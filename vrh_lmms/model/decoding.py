"""How packed `generate` decodes: a static KV cache (and, on CUDA, transformers' CUDA-graph compile of the decode
step), or today's dynamic cache.

Greedy decoding is launch-bound at 7B (one small kernel after another per token): a static cache gives every decode
step the same shapes, so transformers' own compile path (`torch.compile`, mode reduce-overhead: CUDA graphs) can
replay the step as one graph. The ablation that packing applies per row is a multiplicative per-row head mask built
before the call (vrh_lmms.model.ablation.RowAblator), so the compiled step has no Python branch that depends on the
data.

Modes (model arg ``decode=``):

* ``dynamic``: transformers' DynamicCache, as before;
* ``static``: StaticCache; on CUDA transformers also compiles the decode step (CUDA graphs); on CPU the cache alone
  (token-identical to ``dynamic`` in float32: tests/integration/test_decoding.py);
* ``auto`` (default): ``static`` on CUDA, ``dynamic`` elsewhere.

A family that cannot (its forward is not declared compilable, or its generation config brings its own cache) decodes
with ``dynamic``, said in one logged line.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from vrh_lmms.base import console
from vrh_lmms.base.errors import VRHError

MODES = ("auto", "static", "dynamic")
DEFAULT = "auto"


def check_decode(mode: str | None) -> str:
    """The decode mode named by `mode` (None: the default)."""
    mode = DEFAULT if mode is None else str(mode).strip().lower()
    if mode not in MODES:
        raise VRHError(f"decode={mode!r} unknown; use one of {', '.join(MODES)}")
    return mode


def static_unsupported(model: nn.Module) -> str | None:
    """Why this model cannot decode with a static cache (None: it can)."""
    if not getattr(model, "_can_compile_fullgraph", False):
        return f"{type(model).__name__} does not declare a compilable forward (static cache not supported)"
    own = getattr(getattr(model, "generation_config", None), "cache_implementation", None)
    if own not in (None, "dynamic", "static"):
        return f"{type(model).__name__} brings its own cache ({own})"
    return None


def resolve(mode: str, model: nn.Module) -> tuple[str, str | None]:
    """(`static` or `dynamic`, why static was not used where it was asked for or would be the default)."""
    mode = check_decode(mode)
    if mode == "dynamic":
        return "dynamic", None
    on_cuda = getattr(getattr(model, "device", None), "type", "cpu") == "cuda"
    if mode == "auto" and not on_cuda:
        return "dynamic", None
    reason = static_unsupported(model)
    return ("dynamic", reason) if reason else ("static", None)


class Decoding:
    """The generate kwargs of one decode mode for one model, with its one-line fallback notice."""

    def __init__(self, model: nn.Module, mode: str = DEFAULT) -> None:
        self.requested = check_decode(mode)
        self.model = model
        self.cache, reason = resolve(self.requested, model)
        self._said = False
        if reason:
            self.fall_back(reason)

    def fall_back(self, reason: str) -> None:
        """Decode with the dynamic cache from now on; say why once."""
        self.cache = "dynamic"
        if not self._said:
            console.note(f"vrh-lmms: note: decode={self.requested}: {reason}; decoding with the dynamic cache")
            self._said = True

    def kwargs(self, call: dict[str, Any]) -> dict[str, Any]:
        """`call` with this mode's cache, unless the call names its own cache."""
        if self.cache != "static" or call.get("cache_implementation") is not None or call.get("past_key_values"):
            return call
        return dict(call, cache_implementation="static")
