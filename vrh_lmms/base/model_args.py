"""The model args a `vrh_*` model takes on top of its lmms-eval backend's: one table that the wrapper (VRHMixin), the
commands' checks before a model loads (vrh_lmms.harness.preload) and the unknown-key message all read.

lmms-eval backends end unknown keys in a traceback (`assert kwargs == {}`) after the run has started, or drop them
silently; checked here first, a typo is one line with the close names."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.tables import did_you_mean


@dataclass(frozen=True)
class ModelArg:
    name: str
    help: str
    chooses_heads: bool = False  # commands that set the heads per configuration (sweep, discover) refuse it


_ARGS = (
    ModelArg("heads", "head spec to ablate: none, top<K>, random<K>, like:top<K>, L12H3;L14H0, paper:...", True),
    ModelArg("heads_file", "heads file (vrh-heads/1) the spec ranks from", True),
    ModelArg("ablation", "zero, mean, uniform or uniform_image", True),
    ModelArg("seed", "seed of random and layer-matched draws", True),
    ModelArg("allow_cross_model", "use a heads file of another model or geometry", True),
    ModelArg("means_file", "per-head mean outputs for ablation=mean", True),
    ModelArg("ablation_method", "auto, fold or hook"),
    ModelArg("heads_cell", "scoring cell of the heads file to rank by", True),
    ModelArg("dtype", "weights dtype: float32, bfloat16, float16 or auto"),
    ModelArg("box_convention", "box convention the tasks read the model's answers in"),
    ModelArg("control_pool", "what controls draw from: live or all", True),
    ModelArg("heads_source", "benchmark of the paper's published heads (heads=paper:...)", True),
    ModelArg("heads_task", "task whose registered heads file top<K> uses without heads_file=", True),
    ModelArg("decode", "packed generate's KV cache: auto (static on CUDA), static or dynamic"),
)
VRH_MODEL_ARGS: dict[str, ModelArg] = {a.name: a for a in _ARGS}
HEAD_ARGS: tuple[str, ...] = tuple(a.name for a in _ARGS if a.chooses_heads)
# What lmms-eval's evaluator adds to the parsed --model_args of every model (create_from_arg_string's extra dict).
EVALUATOR_ARGS = ("batch_size", "max_batch_size", "device")


def check_model_args(args: Mapping[str, Any], backend_args: Iterable[str], model: str) -> None:
    """Refuse a key that neither the vrh table nor the backend constructor takes, naming the close ones."""
    known = set(VRH_MODEL_ARGS) | set(backend_args) | set(EVALUATOR_ARGS)
    for key in args:
        if key not in known:
            raise VRHError(f"model arg {key}={args[key]!r} is not one that {model} takes{did_you_mean(key, known)}; "
                           f"it takes: {', '.join(sorted(known))}")
