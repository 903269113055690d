"""Which model `vrh-lmms demo` runs, and on which scenes: the shipped model, a model written by `vrh-lmms train-tiny`
(its demo_spec.json), or a folder of any checkpoint of a registered family (its `vrh_*` model).

The lmms-eval model is chosen as `vrh.load` chooses it (vrh_lmms.harness.preload.model_for_checkpoint). A checkpoint
no family claims would run through `vrh_hf`, which ablates its heads but knows no image-token layout, so the demo's
discovery cannot run on it: it is refused in one line, from config.json, naming why. A model
without a demo spec gets the default synthetic scenes at the image size its processor works at. The steps that only
make sense on the demo's own Qwen2.5-VL models (a second model on the same text backbone, the applications, the
recall step against the shipped text backbone, the design targets) are refused, or for recall (on by default)
skipped, in one line before any model loads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.paths import assets_path
from vrh_lmms.base.pretrained import DEMO_FAMILY
from vrh_lmms.base.synth.demo_spec import SPEC_FILE, DemoSpec
from vrh_lmms.base.synth.scenes import SceneConfig
from vrh_lmms.harness.preload import ModelChoice, check_pretrained, load_config, model_for_checkpoint

DEFAULT_IMAGE_SIZE = 224  # scenes for a processor that takes any size (Qwen's min/max pixels, tiling)
IMAGE_SIZES = (112, 896)  # a processor's own size is kept within these (scenes need room for 3-5 objects)
MAX_SIDE = 4096  # a larger "side" is a pixel count
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")
# The image size keys of an image processor, most telling first (a centre crop is what the model sees).
SIZE_KEYS = (("crop_size", "height"), ("crop_size", None), ("size", "height"), ("size", "shortest_edge"),
             ("max_image_size", "longest_edge"), ("size", "longest_edge"), ("size", None), ("image_size", None))
DEMO_ONLY = ("steps built on the demo's own Qwen2.5-VL models (a text backbone it shares with a second model, "
             "ranking data from its scenes)")


def _image_processor_config(folder: Path) -> dict[str, Any]:
    for name in PROCESSOR_FILES:
        path = folder / name
        if path.is_file():
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                return data.get("image_processor") if isinstance(data.get("image_processor"), dict) else data
    return {}


def processor_image_size(folder: str | Path) -> int | None:
    """The square side, in pixels, the checkpoint's image processor resizes or crops to (its crop_size, size, tile
    size); None where it keeps any size (pixel budgets such as Qwen's, which read as areas, not sides)."""
    config = _image_processor_config(Path(folder))
    size = config.get("size")
    if "min_pixels" in config or "max_pixels" in config or (isinstance(size, dict) and isinstance(
            size.get("longest_edge"), int) and size["longest_edge"] > MAX_SIDE):  # pixel budgets (Qwen-VL)
        return None
    for key, sub in SIZE_KEYS:
        value = config.get(key)
        if sub is not None:
            value = value.get(sub) if isinstance(value, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and 28 <= value <= MAX_SIDE:
            return value
    return None


def default_spec(folder: str | Path) -> DemoSpec:
    """The demo's scenes for a model not trained on them: the default scenes at the processor's image size (kept
    within IMAGE_SIZES, a multiple of the answer grid), objects scaled with the image; the prompt after the image."""
    base = DemoSpec()
    size = processor_image_size(folder) or DEFAULT_IMAGE_SIZE
    size = min(max(size, IMAGE_SIZES[0]), IMAGE_SIZES[1]) // base.coord_bin * base.coord_bin
    scene = SceneConfig()
    scale = size / scene.image_size
    return replace(base, image_size=size, scene={"min_size": max(8, round(scene.min_size * scale)),
                                                 "max_size": max(16, round(scene.max_size * scale))})


@dataclass(frozen=True)
class DemoModel:
    """The demo's model: its folder, the `vrh_*` model and family that run it, and the scenes it is shown."""

    folder: Path
    choice: ModelChoice
    spec: DemoSpec
    trained_for_demo: bool  # a Qwen2.5-VL checkpoint with its demo_spec.json: the shipped model or train-tiny's
    shipped: bool

    @property
    def model_id(self) -> str:
        return self.choice.model_id

    @property
    def family(self) -> str:
        return self.choice.family.name

    def model_args(self) -> str:
        """The model args: those the demo spec sets for its Qwen2.5-VL models (dtype, pixels, prompt position), else
        the checkpoint in float32 (the demo runs on CPU) with its family's `demo_model_args`."""
        if self.family == DEMO_FAMILY:
            args = {"pretrained": self.folder, **self.spec.model_args()}
        else:
            args = {"pretrained": self.folder, "dtype": "float32", **dict(self.choice.family.demo_model_args)}
        return ",".join(f"{k}={v}" for k, v in args.items())

    def scenes(self) -> str:
        """Where the scene settings come from."""
        if (self.folder / SPEC_FILE).is_file():
            return f"its {SPEC_FILE} ({self.spec.image_size} px scenes)"
        return f"the default synthetic scenes at {self.spec.image_size} px (no {SPEC_FILE}; sized for its processor)"

    def describe(self) -> str:
        """One line naming what runs (plain text; the folder is the user's, shown as given)."""
        kind = "any image-text-to-text checkpoint" if self.choice.generic else f"family {self.family}"
        return f"{self.folder} through {self.model_id} ({kind}), on {self.scenes()}"

    def recall_skipped(self) -> str | None:
        """Why the recall step (on by default) does not run on this model; None where it does."""
        if self.trained_for_demo:
            return None
        return ("the recall step (it compares the heads with those of the shipped demo backbone, which only the "
                "demo's own Qwen2.5-VL models share)")

    def refuse_steps(self, transfer: str | None, applications: bool) -> None:
        """The optional steps this model cannot do, refused in one line before any model loads."""
        if self.trained_for_demo:
            return
        asked = [name for name, on in (("--transfer", transfer is not None), ("--applications", applications)) if on]
        if asked:
            raise VRHError(f"{' and '.join(asked)}: {DEMO_ONLY}; {self.folder} is a {self.family} checkpoint without "
                           f"{SPEC_FILE} (run them on a model written by `vrh-lmms train-tiny`, or leave them out)")


def _refuse_generic(folder: Path, config: Any) -> None:
    """A checkpoint no family claims runs through `vrh_hf`, which has no image-token layout, so no discovery: refused
    in one line from config.json alone, naming why (transformers does not know the type, its heads cannot be cut, or
    the layout)."""
    # deferred: keeps `vrh-lmms demo --help` free of torch, transformers
    from vrh_lmms.model.generic import survey_checkpoint

    model_type = getattr(config, "model_type", None)
    try:
        found = survey_checkpoint(str(folder))
    except Exception as exc:  # transformers cannot build the type from its config
        raise VRHError(f"--pretrained {folder}: model_type {model_type!r} is claimed by no vrh-lmms family and "
                       f"transformers cannot build it ({str(exc).splitlines()[0][:200]}); see `vrh-lmms models`") \
            from None
    if not found.ok:
        raise VRHError(f"--pretrained {folder} ({found.model_type}, {found.class_name}): no vrh-lmms family claims it "
                       f"and vrh_hf cannot cut its heads: {found.refusal}")
    raise VRHError(f"--pretrained {folder} ({found.model_type}): the demo starts with discovery, which reads attention "
                   f"over the image tokens, and no vrh-lmms family records where this model type puts them (its "
                   f"image-token layout); vrh_hf still ablates its heads in `vrh-lmms sweep` and `vrh.evaluate` "
                   f"(docs/models.md)")


def shipped_model() -> Path:
    """The shipped demo model's folder (refused in one line where it is missing)."""
    path = assets_path() / "demo_model"
    if not (path / "config.json").is_file():
        raise VRHError(f"the shipped demo model is missing from {path}; reinstall vrh-lmms or train one with "
                       f"`vrh-lmms train-tiny`")
    return path


def demo_model(model_path: str | Path | None) -> DemoModel:
    """The demo's model, checked before anything is written or loaded: the shipped one when `model_path` is None."""
    shipped = model_path is None
    folder = Path(model_path) if model_path else shipped_model()
    check_pretrained(str(folder), name="--pretrained")
    if not folder.is_dir():
        raise VRHError(f"--pretrained {folder}: the demo runs a local checkpoint folder (download a hub model first, "
                       f"e.g. `hf download ORG/NAME --local-dir DIR`)")
    config = load_config(str(folder))
    choice = model_for_checkpoint(str(folder))
    if choice.generic:
        _refuse_generic(folder, config)
    has_spec = (folder / SPEC_FILE).is_file()
    spec = DemoSpec.load(folder) if has_spec else default_spec(folder)
    return DemoModel(folder, choice, spec, trained_for_demo=has_spec and choice.family.name == DEMO_FAMILY,
                     shipped=shipped)
