"""The mixin that turns an lmms-eval backend into a `vrh_*` backend with head ablation.

`VRHMixin` pops our model args before the base constructor (lmms-eval backends reject unknown kwargs), chooses the
device when none works (CPU machines need `device=cpu`, `device_map=cpu`), optionally loads weights in another
dtype, then locates the language decoder, resolves the head spec against its geometry and applies the ablation
to the unwrapped model (so it also holds under `accelerate launch`). With `heads=none` nothing is touched: outputs
are the base backend's.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

import torch
from accelerate import DistributedType
from lmms_eval.api.model import lmms
from lmms_eval.utils import simple_parse_args_string
from loguru import logger
from transformers import PreTrainedModel

from vrh_lmms.base.boxes import context
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.families import get_family
from vrh_lmms.base.heads import kinds, paper, registry
from vrh_lmms.base.heads.heads_file import HeadsFile, load_heads_file
from vrh_lmms.base.heads.spec import HeadSet, check_pool, check_spec_form, needs_heads_file, resolve_spec
from vrh_lmms.base.model_args import check_model_args
from vrh_lmms.base.pretrained import check_hub_reachable, check_pretrained, named_model_args
from vrh_lmms.model.ablation import Ablator, RowConfig, check_method, check_mode, load_means, means_path_for
from vrh_lmms.model.backbone import dead_heads, locate_decoder
from vrh_lmms.model.decoding import check_decode
from vrh_lmms.model.device import default_device, default_device_map
from vrh_lmms.model.packing import PackedGenerate, packing_unsupported
from vrh_lmms.model_wrappers.manifests import WRAPPERS
from vrh_lmms.model_wrappers.results_hook import publish_record

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float16": torch.float16, "fp16": torch.float16}


def _as_bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("1", "true", "yes"):
        return True
    if str(value).lower() in ("0", "false", "no", "none", ""):
        return False
    raise VRHError(f"model arg {name}={value!r}: expected true or false")


@contextlib.contextmanager
def load_dtype(dtype: torch.dtype | None):
    """Make every `from_pretrained` inside the block load weights in `dtype` (backends hard-code bfloat16)."""
    if dtype is None:
        yield
        return
    original = PreTrainedModel.from_pretrained.__func__

    def patched(cls, *args, **kwargs):
        kwargs.pop("torch_dtype", None)
        kwargs["dtype"] = dtype
        return original(cls, *args, **kwargs)

    PreTrainedModel.from_pretrained = classmethod(patched)
    try:
        yield
    finally:
        PreTrainedModel.from_pretrained = classmethod(original)


def _as_int(value: Any, name: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise VRHError(f"model arg {name}={value!r}: expected a whole number") from None


def backend_params(cls: type) -> dict[str, inspect.Parameter]:
    """Parameters the backend constructor chain below VRHMixin in `cls` accepts, with the defaults that apply.

    Follows constructors that pass `**kwargs` on (InternVL3_5 -> InternVL3, test subclasses of a backend)."""
    mro = cls.__mro__
    found: dict[str, inspect.Parameter] = {}
    for klass in mro[mro.index(VRHMixin) + 1:]:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters
        for name, param in list(params.items())[1:]:  # after `self`
            if param.kind not in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                found.setdefault(name, param)
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            break
    return found


def wrapper_params(cls: type) -> set[str]:
    """Model args that the mixins before VRHMixin in `cls` take themselves (`image_position`): they consume them
    before VRHMixin's constructor runs, so a check before the model is built must know them too."""
    mro = cls.__mro__
    names: set[str] = set()
    for klass in mro[:mro.index(VRHMixin)]:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        names |= {name for name, p in list(inspect.signature(init).parameters.items())[1:]
                  if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return names


def _default(params: dict[str, inspect.Parameter], name: str) -> Any:
    return params[name].default if name in params else None


def in_lmms_eval_cli() -> bool:
    """True when the process is the lmms-eval command line (which prints tracebacks and exits 0 on errors)."""
    if os.environ.get("VRH_LMMS_CLI") == "1":
        return True
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    main = sys.modules.get("__main__")
    main_file = str(getattr(main, "__file__", "") or "")
    return prog == "lmms-eval" or main_file.endswith(os.path.join("lmms_eval", "__main__.py"))


def cli_tasks() -> tuple[str, ...]:
    """The tasks the lmms-eval command line evaluates (`--tasks a,b`), read from its arguments; () elsewhere."""
    if not in_lmms_eval_cli():
        return ()
    argv, found = sys.argv[1:], ""
    for i, arg in enumerate(argv):
        if arg == "--tasks" and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith("--tasks="):
            found = arg.split("=", 1)[1]
    return tuple(t.strip() for t in found.split(",") if t.strip())


def user_errors_exit(init):
    """Under the lmms-eval CLI, a bad model arg ends the run with one clear line and exit code 2."""

    @functools.wraps(init)
    def wrapper(self, *args, **kwargs):
        try:
            return init(self, *args, **kwargs)
        except VRHError as exc:
            if in_lmms_eval_cli():
                print(f"vrh-lmms: error: {exc}", file=sys.stderr, flush=True)
                raise SystemExit(2) from None
            raise

    return wrapper


# lmms-eval's own RefCOCO tasks (prefix) and the vrh task that holds the paper's protocol on the same data
PAPER_TASKS = {"refcoco+": "vrh_refcoco_plus_val", "refcocog": "vrh_refcocog_val", "refcoco": "vrh_refcoco_val"}


def _hint_own_tasks() -> None:
    """One line per lmms-eval RefCOCO task on the command line: the paper's protocol is the vrh task."""
    for task in cli_tasks():
        ours = next((v for prefix, v in PAPER_TASKS.items() if task.startswith(prefix)), None)
        if ours is not None:
            print(f"vrh-lmms: note: {task} is lmms-eval's own task (its prompt and scoring); the paper's protocol is "
                  f"--tasks {ours} --include_path \"$(vrh-lmms tasks-path)\"", file=sys.stderr, flush=True)


@user_errors_exit
def _named_args(_self: Any, args: dict[str, Any], family: str) -> dict[str, Any]:
    return named_model_args(args, family)


class VRHMixin:
    """Mix in before an lmms-eval backend class; set `vrh_family` (a key of vrh_lmms.base.families.FAMILIES)."""

    vrh_family: str = ""
    # the most docs one backend call takes (None: no limit); `--batch-size` beyond it is refused before the load
    # (vrh_lmms.harness.preload.check_batch_size)
    vrh_max_batch_size: int | None = None
    # names of the base constructor's device arguments (most backends use both)
    vrh_device_args: tuple[str, ...] = ("device", "device_map")

    @user_errors_exit
    def __init__(self, *args, heads: str | None = None, heads_file: str | None = None, ablation: str = "zero",
                 seed: int = 0, allow_cross_model: Any = False, means_file: str | None = None,
                 ablation_method: str = "auto", heads_cell: str | None = None, dtype: str | None = None,
                 box_convention: str | None = None, control_pool: str = kinds.DEFAULT_POOL,
                 heads_source: str | None = None, heads_task: str | None = None, decode: str | None = None,
                 **kwargs) -> None:
        # Every model arg is checked before the checkpoint is looked at and long before any weight loads.
        check_model_args(kwargs, backend_params(type(self)), self.vrh_model_id())
        family = get_family(self.vrh_family)
        # packed generate's cache (vrh_lmms.model.decoding), checked before loading
        self.vrh_decode = check_decode(decode)
        torch_dtype = self._parse_dtype(dtype)
        for name, value, check in (("ablation", ablation, check_mode), ("ablation_method", ablation_method,
                                                                       check_method)):
            try:
                check(str(value))
            except VRHError as exc:
                raise VRHError(f"model arg {name}={value!r}: {exc}") from None
        self.vrh_control_pool = check_pool(str(control_pool), where="model arg control_pool=")
        seed = _as_int(seed, "seed")
        cross_model = _as_bool(allow_cross_model, "allow_cross_model")
        spec_text = None if heads is None else str(heads)
        from_paper = spec_text is not None and spec_text.startswith(paper.PREFIX)
        check_spec_form(spec_text[len(paper.PREFIX):] if from_paper else spec_text)
        if from_paper and heads_file:
            raise VRHError(f"model arg heads={spec_text} takes the paper's published heads; drop heads_file=")
        self.vrh_heads_file: HeadsFile | None = load_heads_file(heads_file) if heads_file else None
        kwargs = self._choose_device(kwargs)
        given = "pretrained" in kwargs or bool(args)
        pretrained = kwargs.get("pretrained", args[0] if args else _default(self._base_init_params(), "pretrained"))
        check_pretrained(pretrained)
        _hint_own_tasks()
        check_hub_reachable(pretrained, given=given)  # the checkpoint first: a heads lookup needs one that exists
        if self.vrh_heads_file is None and not from_paper and needs_heads_file(spec_text):
            # what `vrh-lmms discover` registered for this checkpoint, or the heads the package ships for it
            found = registry.lookup(str(pretrained), heads_task, evaluated=cli_tasks())
            self.vrh_heads_file = load_heads_file(found)
            self.vrh_heads_file.source = "registry"
        self.vrh_spec_text = spec_text  # what `_vrh_load_context` may check against config.json before the load
        try:
            with load_dtype(torch_dtype), self._vrh_load_context(args, kwargs):
                super().__init__(*args, **kwargs)
        except OSError as exc:  # transformers' "not a local folder and not a valid model identifier" and kin
            raise VRHError(f"pretrained={pretrained}: cannot be loaded ({str(exc).splitlines()[0][:300]})") from None
        self.vrh_family_spec = family
        model = self.model  # lmms-eval backends unwrap accelerate's wrapper here
        self._vrh_check_model_type(model, family)
        self.vrh_decoder = self._vrh_locate(model, family)
        # read from the pristine weights, before any ablation folds zeros into o_proj (None: could not be read)
        self.vrh_dead_heads = dead_heads(self.vrh_decoder)
        if from_paper:  # the paper's published heads, for the geometry the loaded model has
            self.vrh_heads_file = paper.paper_heads_file(pretrained, family.name, self.vrh_decoder.geometry,
                                                         heads_source)
            spec_text = spec_text[len(paper.PREFIX):]
        self.vrh_headset: HeadSet = resolve_spec(
            spec_text, self.vrh_decoder.geometry, heads_file=self.vrh_heads_file,
            seed=seed, allow_cross_model=cross_model, cell=heads_cell,
            dead=self.vrh_dead_heads or (), pool=self.vrh_control_pool)
        if self.vrh_headset.kind in kinds.CLAIMS and self.vrh_headset.dead:
            logger.warning(f"vrh: {len(self.vrh_headset.dead)} of the {self.vrh_headset.k} heads of "
                           f"{self.vrh_headset.spec} write nothing (o_proj columns all zero): "
                           f"{', '.join(map(str, self.vrh_headset.dead))}")
        self.vrh_mode = "none" if not self.vrh_headset.heads else ablation
        self.vrh_pretrained = kwargs.get("pretrained") or (args[0] if args else None)
        means = self._load_means(means_file, heads_file) if self.vrh_mode == "mean" else None
        self.vrh_ablator = Ablator(model, self.vrh_decoder, method=self._ablation_method(ablation_method))
        if self.vrh_headset.heads:
            self.vrh_ablator.apply(self.vrh_headset, mode=ablation, means=means)
            logger.info(f"vrh: ablating {len(self.vrh_headset.heads)} heads ({self.vrh_headset.spec}, "
                        f"{ablation}, {self.vrh_ablator.method})")
        self._vrh_activate_box_convention(box_convention or family.box_convention)
        self._vrh_publish()

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None):
        """lmms-eval's constructor from `a=1,b=x`, with `pretrained=vrh-demo` expanded to the shipped demo model and
        the model args it was trained with (vrh_lmms.base.pretrained.named_model_args)."""
        args = _named_args(None, simple_parse_args_string(arg_string or ""), cls.vrh_family)
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None}
        return cls(**args, **extra)

    # ----------------------------------------------------------------------------------------------- helpers
    def _vrh_load_context(self, args: tuple, kwargs: dict[str, Any]) -> contextlib.AbstractContextManager:
        """Context around the base constructor, for wrappers that must correct how a backend loads its model."""
        return contextlib.nullcontext()

    def _vrh_locate(self, model: Any, family: Any):
        """The language decoder (vrh_lmms.model.backbone.Decoder); wrappers without a family record find it
        otherwise (vrh_hf)."""
        return locate_decoder(model, family)

    @staticmethod
    def _vrh_check_model_type(model: Any, family: Any) -> None:
        """A checkpoint of another family loads, but its box convention and layout would be wrong: say so."""
        model_type = getattr(getattr(model, "config", None), "model_type", None)
        if model_type is not None and model_type not in family.model_types:
            logger.warning(f"vrh: checkpoint model_type {model_type!r} is not one of family {family.name!r} "
                           f"({', '.join(family.model_types)}); box convention and image layout may not fit")

    @staticmethod
    def _parse_dtype(dtype: str | None) -> torch.dtype | None:
        if dtype is None or dtype == "auto":
            return None
        if str(dtype) not in _DTYPES:
            raise VRHError(f"model arg dtype={dtype!r}: use one of {', '.join(_DTYPES)}")
        return _DTYPES[str(dtype)]

    def _choose_device(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """Without CUDA, a CUDA device (lmms-eval's default) becomes the CPU; explicit CPU choices stay.

        A `device_map` of "" (llava_hf's and phi4_multimodal's default, meaning "one device") becomes that device in
        a single process: transformers 5 refuses "" (under `accelerate launch` the backend replaces it itself).
        """
        params = self._base_init_params()
        if not torch.cuda.is_available():
            dev = default_device()
            for name in self.vrh_device_args:
                if name not in params:
                    continue
                value = kwargs.get(name, params[name].default)
                if value is None or str(value).startswith("cuda") or value == "auto":
                    kwargs[name] = dev if name == "device" else default_device_map()
        single_process = int(os.environ.get("WORLD_SIZE", "1")) <= 1
        if single_process and "device" in params and kwargs.get("device_map", _default(params, "device_map")) == "":
            kwargs["device_map"] = str(kwargs.get("device", params["device"].default))
        return kwargs

    def _base_init_params(self) -> dict[str, inspect.Parameter]:
        return backend_params(type(self))

    @classmethod
    def vrh_model_id(cls) -> str:
        """The `--model` name this class is registered under (its class name when none is)."""
        return next((model_id for model_id, (_, simple, chat) in WRAPPERS.items() if cls.__name__ in (simple, chat)),
                    cls.__name__)

    def _ablation_method(self, requested: str) -> str:
        accelerator = getattr(self, "accelerator", None)
        if requested == "auto" and accelerator is not None and getattr(accelerator, "num_processes", 1) > 1:
            if accelerator.distributed_type == DistributedType.FSDP:
                return "hook"  # FSDP flattens parameters; editing o_proj weights in place is not safe
        return requested

    def _load_means(self, means_file: str | None, heads_file: str | None) -> torch.Tensor:
        path = means_file or (str(means_path_for(heads_file)) if heads_file else None)
        if path is None:
            raise VRHError("ablation=mean needs means_file=PATH (written by `vrh-lmms discover` beside the heads "
                           "file)")
        return load_means(path)

    def _vrh_activate_box_convention(self, name: str) -> None:
        """Tell our tasks which box convention this model speaks (and its resize parameters)."""
        params = {k: getattr(self, k) for k in ("min_pixels", "max_pixels") if getattr(self, k, None) is not None}
        context.set_active(name, **params)

    def _vrh_publish(self) -> None:
        """Offer this model's `vrh` block to the results the lmms-eval CLI saves for it (results_hook), under the
        names lmms-eval writes into `config.model`: the registered name, or for a model given as an object its
        config's `_name_or_path` or its class name."""
        config = getattr(self, "config", None)
        publish_record(self.vrh_record(), owners=(type(self).__name__, getattr(config, "_name_or_path", None)))

    # ------------------------------------------------------------------------------------------ public API
    vrh_keep_loaded: bool = False

    def clean(self) -> None:
        """lmms-eval deletes the model after each evaluation; sweeps and discovery keep it for the next run."""
        if self.vrh_keep_loaded:
            pack = self._vrh_pack
            if pack is None or pack.current == pack.n - 1:  # within a pack, once at its end: replays allocate little
                gc.collect()
            return
        super().clean()  # type: ignore[misc]

    def vrh_apply(self, headset: HeadSet, mode: str = "zero", means: torch.Tensor | None = None) -> None:
        """Swap in another head set without reloading the model (sweeps use this)."""
        self.vrh_unpack()
        self.vrh_ablator.apply(headset, mode=mode, means=means)
        self.vrh_headset = headset
        self.vrh_mode = mode if headset.heads else "none"
        self._vrh_publish()

    # ------------------------------------------------------------------------------------------- packing
    _vrh_pack = None  # the PackedGenerate serving a pack of configurations, if any
    _vrh_pack_sets: list[tuple[HeadSet, str]] = []

    def vrh_pack_unsupported(self) -> str | None:
        """Why this model cannot evaluate several head sets in one pass (None: it can)."""
        return packing_unsupported(self.model)

    def vrh_pack(self, headsets: list[HeadSet], modes: list[str], means: torch.Tensor | None = None):
        """Serve these head sets from shared generate calls (docs/sweeps.md); `vrh_serve(i)` picks the one whose
        lmms-eval pass runs now, `vrh_unpack()` ends it. The weights stay pristine meanwhile."""
        self.vrh_unpack()
        self.vrh_ablator.restore()
        configs = [RowConfig(tuple(hs.heads), mode if hs.heads else "zero") for hs, mode in zip(headsets, modes)]
        pack = PackedGenerate(self.model, self.vrh_decoder, configs, means=means,
                              method=self.vrh_ablator.requested_method,
                              decode=getattr(self, "vrh_decode", None) or "auto")
        pack.install()
        self._vrh_pack, self._vrh_pack_sets = pack, list(zip(headsets, modes))
        self.vrh_serve(0)
        return pack

    def vrh_serve(self, index: int) -> None:
        if self._vrh_pack is None:
            raise VRHError("vrh_serve needs a pack (vrh_pack first)")
        self._vrh_pack.serve(index)
        headset, mode = self._vrh_pack_sets[index]
        self.vrh_headset = headset
        self.vrh_mode = mode if headset.heads else "none"
        self._vrh_publish()

    def vrh_unpack(self) -> None:
        if self._vrh_pack is not None:
            self._vrh_pack.uninstall()
        self._vrh_pack, self._vrh_pack_sets = None, []

    def _vrh_method(self) -> str | None:
        """How the current head set is applied; a packed row reproduces the arithmetic of the method it names."""
        if self._vrh_pack is not None:
            return self._vrh_pack.method if self.vrh_headset.heads else None
        return self.vrh_ablator.method

    def vrh_record(self, config: dict[str, Any] | None = None) -> dict[str, Any]:
        """The `vrh` block of results JSON (docs/contracts.md)."""
        hs = self.vrh_headset
        return {
            "schema": 1,
            "family": self.vrh_family,
            "pretrained": str(self.vrh_pretrained) if self.vrh_pretrained is not None else None,
            "geometry": self.vrh_decoder.geometry.to_dict(),
            # heads whose o_proj columns are all zero (they write nothing); None: the weights could not be read
            "dead_heads": None if self.vrh_dead_heads is None else [str(h) for h in self.vrh_dead_heads],
            "ablation": {"spec": hs.spec, "heads": hs.names, "mode": self.vrh_mode, "seed": hs.seed,
                         "method": self._vrh_method(), "heads_file": hs.heads_file, "pool": hs.pool,
                         "dead_heads": [str(h) for h in hs.dead]},
            "config": config or {"id": hs.spec if hs.heads else "baseline", "kind": hs.kind, "k": hs.k,
                                 "seed": hs.seed},
        }


def with_call(obj: Any, call: Callable[..., Any], cache: dict[type, type]) -> Any:
    """Give `obj` a subclass of its class (same name and module, made once per class in `cache`) whose `__call__`
    is `call`: a correction to how a backend calls its processor, invisible to code that reads the class name.
    `call` reaches the original as `super(type(self), self).__call__`."""
    cls = type(obj)
    if cls not in cache:
        cache[cls] = type(cls.__name__, (cls,), {"__call__": call, "__module__": cls.__module__})
    obj.__class__ = cache[cls]
    return obj


def unavailable_backend(error: Callable[[], Exception]) -> type:
    """A stand-in for an lmms-eval backend whose module could not be imported (an optional extra is missing), so
    the wrapper class can still be defined and registered; constructing it raises `error()`, one line naming what to
    install."""
    class Unavailable(lmms):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise error()

        def loglikelihood(self, requests):  # pragma: no cover - never constructed
            raise NotImplementedError

        def generate_until(self, requests):  # pragma: no cover
            raise NotImplementedError

        def generate_until_multi_round(self, requests):  # pragma: no cover
            raise NotImplementedError

    return Unavailable
