"""Checks on a model that need no weights: its registered name, its model args, its checkpoint path and the head
geometry its config.json declares. Commands run them before the model loads (minutes on a 7B), so a typo fails
in seconds with one line naming the bad value."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.families import Family, family_for_config, get_family
from vrh_lmms.base.heads.geometry import Geometry
from vrh_lmms.base.model_args import HEAD_ARGS, check_model_args  # noqa: F401  (HEAD_ARGS: callers)
from vrh_lmms.base.pretrained import (  # noqa: F401  (check_pretrained: callers)
    DEMO_FAMILY,
    HUB_EXAMPLE,
    check_pretrained,
    hub_offline,
    is_demo_name,
    named_model_args,
)
from vrh_lmms.base.tables import did_you_mean
from vrh_lmms.model_wrappers.manifests import WRAPPERS

# HEAD_ARGS: the model args that choose heads (the table: vrh_lmms.base.model_args); commands that set the heads
# themselves (sweep, discover) refuse them.


def vrh_model_names() -> list[str]:
    return sorted(WRAPPERS)


def check_model_name(name: str) -> None:
    """`name` is a registered vrh_* model; read from the registry, without importing any backend."""
    # deferred: keeps `vrh-lmms demo --help` free of lmms_eval
    from lmms_eval.models import list_available_models

    names = vrh_model_names()
    vrh = ", ".join(names)
    if name not in list_available_models(include_aliases=True):
        raise VRHError(f"--model {name!r} is not a registered model{did_you_mean(name, names)}; the vrh-lmms models "
                       f"are: {vrh}")
    if name not in names:  # a vrh model is one that a registered family lists (vrh_lmms.base.families)
        raise VRHError(f"--model {name!r} is lmms-eval's own backend, without head ablation; use one of the "
                       f"vrh-lmms models: {vrh}")


def model_class(name: str) -> type:
    """The lmms-eval class registered as `name`, which must be a vrh_* model (one with head ablation)."""
    # deferred: keeps `vrh-lmms demo --help` free of lmms_eval
    from lmms_eval.models import get_model

    check_model_name(name)
    try:
        cls = get_model(name)
    except Exception as exc:  # an import error of the backend (a missing optional dependency)
        raise VRHError(f"--model {name!r} cannot be imported: {str(exc).splitlines()[0][:300]}") from None
    # deferred: keeps `vrh-lmms demo --help` free of torch, loguru
    from vrh_lmms.model_wrappers.base import VRHMixin

    if not issubclass(cls, VRHMixin):
        raise VRHError(f"--model {name!r} has no head ablation; use one of the vrh-lmms models: "
                       f"{', '.join(vrh_model_names())}")
    return cls


def batch_limit(cls: type) -> int | None:
    """The most docs one backend call takes, as the wrapper declares it (`vrh_max_batch_size`; our own backends'
    `max_batch_size`); None: no limit."""
    for name in ("vrh_max_batch_size", "max_batch_size"):
        limit = getattr(cls, name, None)
        if isinstance(limit, int) and not isinstance(limit, bool):
            return limit
    return None


def check_batch_size(name: str, cls: type, batch_size: int) -> None:
    """`--batch-size` within the wrapper's limit, before the load (lmms-eval's llava_hf and InternVL backends assert
    it only once loaded)."""
    limit = batch_limit(cls)
    if limit is not None and batch_size > limit:
        raise VRHError(f"--batch-size {batch_size}: {name} takes at most {limit} doc{'s' if limit > 1 else ''} per "
                       f"call; use --batch-size {limit}")


def parse_model_args(text: str | None) -> dict[str, Any]:
    """lmms-eval's own parser (`a=1,b=x`), with a malformed entry named."""
    # deferred: keeps `vrh-lmms demo --help` free of lmms_eval
    from lmms_eval.utils import simple_parse_args_string

    for item in [p for p in (text or "").split(",") if p.strip()]:
        if "=" not in item and not item.strip().startswith(("{", "[", "'", '"')):
            raise VRHError(f"--model_args entry {item.strip()!r}: expected KEY=VALUE (e.g. pretrained={HUB_EXAMPLE})")
    try:
        return simple_parse_args_string(text or "")
    except ValueError as exc:
        raise VRHError(f"--model_args {text!r}: {exc}") from None


def refuse_head_args(args: dict[str, Any], command: str, instead: dict[str, str]) -> None:
    """Commands that set the heads per configuration refuse model args that would set them too."""
    for key in HEAD_ARGS:
        if key in args:
            hint = instead.get(key, "it is set by the command")
            raise VRHError(f"model arg {key}={args[key]} is not allowed in `vrh-lmms {command}` --model_args: "
                           f"{hint}")


def constructor_default(cls: type, name: str) -> Any:
    """Default of a constructor argument along the class chain (backends pass **kwargs up)."""
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters
        if name in params and params[name].default is not inspect.Parameter.empty:
            return params[name].default
    return None


# ------------------------------------------------------------------------------------------------ model choice
GENERIC_MODEL = "vrh_hf"  # any image-text-to-text checkpoint no family claims (docs/models.md)


@dataclass(frozen=True)
class ModelChoice:
    """The `vrh_*` lmms-eval model that runs a checkpoint, and the family record it goes by."""

    model_id: str
    family: Family

    @property
    def generic(self) -> bool:
        return self.model_id == GENERIC_MODEL


def model_for_checkpoint(pretrained: str) -> ModelChoice:
    """The `vrh_*` model whose family claims the checkpoint's model_type (config.json, read without weights), else
    `vrh_hf`, which takes any image-text-to-text checkpoint whose heads can be cut. `vrh.load` and `vrh-lmms demo
    --pretrained` both choose with this."""
    if is_demo_name(pretrained):
        family = get_family(DEMO_FAMILY)
        return ModelChoice(family.wrappers[0].model_id, family)
    try:
        family = family_for_config(load_config(pretrained))
    except VRHError:  # no family record for this model type
        family = None
    if family is None or not family.wrappers:
        return ModelChoice(GENERIC_MODEL, get_family("hf"))
    return ModelChoice(family.wrappers[0].model_id, family)


# ------------------------------------------------------------------------------------------------- geometry
def _namespace(value: Any) -> Any:
    if isinstance(value, dict):
        return SimpleNamespace(**{k: _namespace(v) for k, v in value.items()})
    return value


def load_config(pretrained: str, trust_remote_code: bool = False) -> Any:
    """The checkpoint's config without weights: transformers' class where it has one (it moves old top-level
    text fields into text_config), else the raw config.json as attributes (remote-code families)."""
    # deferred: keeps `vrh-lmms demo --help` free of transformers
    from transformers import AutoConfig, PretrainedConfig

    try:
        return AutoConfig.from_pretrained(pretrained, trust_remote_code=trust_remote_code)
    except Exception:
        pass
    try:
        raw, _ = PretrainedConfig.get_config_dict(pretrained)
    except Exception as exc:
        where = "its config.json cannot be read" if Path(pretrained).is_dir() else \
            "not a local folder, and its config.json cannot be fetched from the hub"
        offline = " (HF_HUB_OFFLINE is set and it is not in the local hub cache)" if hub_offline() else ""
        raise VRHError(f"pretrained={pretrained}: {where}{offline}: {str(exc).splitlines()[0][:200]}") from None
    return _namespace(raw)


def config_geometry(config: Any, family) -> Geometry | None:
    """Head geometry of the language decoder as the config declares it; None when the config does not say.

    Mirrors `vrh_lmms.model.backbone.locate_decoder` (which measures the loaded modules and stays the authority)."""
    # deferred: keeps `vrh-lmms demo --help` free of torch
    from vrh_lmms.model.backbone import text_config_of

    text = text_config_of(config, family)

    def num(obj: Any, key: str) -> int | None:
        try:
            value = getattr(obj, key, None)
        except Exception:  # noqa: BLE001 - a per-layer config refuses an attribute that differs by layer
            return None
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    layers, heads = num(text, "num_hidden_layers"), num(text, "num_attention_heads")
    if layers is None or heads is None:
        return None
    # deferred: keeps `vrh-lmms demo --help` free of torch
    from vrh_lmms.model.generic import layer_kinds, linear_kind

    kinds = layer_kinds(text, layers)
    per_layer = [_layer_config(text, i) for i in range(layers)]
    first = next((i for i in range(layers) if not linear_kind(kinds[i])), 0)
    head_dim = num(text, "v_head_dim") or num(text, "head_dim") or num(per_layer[first], "head_dim")
    if head_dim is None:
        hidden = num(text, "hidden_size")
        if hidden is None or hidden % heads:
            return None
        head_dim = hidden // heads
    kv = num(text, "num_key_value_heads") or num(per_layer[first], "num_key_value_heads") or heads
    return Geometry(layers=layers, heads=heads, kv_heads=kv, head_dim=head_dim,
                    head_layers=tuple(i for i in range(layers) if not linear_kind(kinds[i])),
                    layer_head_dims=tuple(num(c, "head_dim") or head_dim for c in per_layer),
                    layer_kv_heads=tuple(num(c, "num_key_value_heads") or kv for c in per_layer))


def _layer_config(text: Any, layer: int) -> Any:
    """One layer's overrides of the text config (transformers' `per_layer_config`, Gemma 4's global layers: their
    head_dim and KV heads), or an empty namespace."""
    table = getattr(text, "per_layer_config", None)
    if table is None:
        return SimpleNamespace()
    try:
        found = table[layer]
    except (TypeError, KeyError, IndexError):
        found = getattr(table, str(layer), None) if not isinstance(table, dict) else table.get(str(layer))
    if isinstance(found, dict):
        return SimpleNamespace(**found)
    return found if found is not None else SimpleNamespace()


@dataclass
class ModelPlan:
    """What is known about a model before it loads."""

    name: str
    args: dict[str, Any]
    cls: type | None = None
    pretrained: str | None = None
    geometry: Geometry | None = None


def plan_args(model: str, model_args: str | None) -> ModelPlan:
    """The checks on `--model` / `--model_args` that need no weights: registered name, every arg's name (against the
    vrh table and the backend constructor, so this imports the backend class), path."""
    # deferred: keeps `vrh-lmms demo --help` free of torch, loguru
    from vrh_lmms.model_wrappers.base import backend_params, wrapper_params

    check_model_name(model)
    args = named_model_args(parse_model_args(model_args))  # pretrained=vrh-demo: the shipped folder and its settings
    cls = model_class(model)
    check_model_args(args, {*backend_params(cls), *wrapper_params(cls)}, model)
    if args.get("pretrained") is not None:
        check_pretrained(args["pretrained"])
    return ModelPlan(model, args, cls)


def plan_geometry(plan: ModelPlan) -> ModelPlan:
    """Import the backend class, resolve the checkpoint (its default when none is given) and read the head
    geometry its config.json declares; no weights are loaded."""
    plan.cls = plan.cls or model_class(plan.name)
    pretrained = plan.args.get("pretrained", constructor_default(plan.cls, "pretrained"))
    plan.pretrained = None if pretrained is None else str(pretrained)
    check_pretrained(plan.pretrained)
    if plan.pretrained is not None:
        trust = str(plan.args.get("trust_remote_code", "")).lower() in ("1", "true", "yes")
        family = get_family(plan.cls.vrh_family)
        if not family.layer_paths:  # vrh_hf: the decoder found generically, on the meta device (no weights)
            # deferred: keeps `vrh-lmms demo --help` free of torch, transformers
            from vrh_lmms.model.generic import survey_checkpoint

            found = survey_checkpoint(plan.pretrained, trust_remote_code=trust)
            if not found.ok:
                raise VRHError(f"{plan.name}: pretrained={plan.pretrained} ({found.model_type}, {found.class_name}): "
                               f"its heads cannot be cut: {found.refusal}")
            plan.geometry = found.geometry
        else:
            plan.geometry = config_geometry(load_config(plan.pretrained, trust_remote_code=trust), family)
    return plan
