"""What the demo model sees and answers: scene config, image size, prompt, coordinate format.

The spec is saved next to the checkpoint (`demo_spec.json`) so the trainer, the probe and the demo command agree on
every setting without copying numbers around.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from vrh_lmms.base.synth.scenes import SceneConfig

SPEC_FILE = "demo_spec.json"
SYSTEM_PROMPT = "You are a helpful assistant."
PROMPT = "Locate {expression} in the image and output its bbox coordinates in JSON format."
# Scene streams: training and held-out scenes come from different generator seeds, so they never coincide.
TRAIN_SCENE_SEED = 1
EVAL_SCENE_SEED = 2
# The demo's two held-out scene sets (ids in the EVAL_SCENE_SEED stream): discovery, and disjoint from it, evaluation.
# `vrh-lmms demo` uses them by default; the tasks vrh_demo_discovery / vrh_demo_grounding have them built in.
DISCOVERY_START = 0
EVAL_START = 100_000
N_DISCOVERY = 32
N_EVAL = 100


@dataclass(frozen=True)
class DemoSpec:
    """Settings shared by training and evaluation. `scene` holds SceneConfig keyword overrides."""

    image_size: int = 224
    coord_bin: int = 4  # answers are pixel coordinates rounded to multiples of this
    scene: dict[str, Any] = field(default_factory=dict)
    # True: the request comes before the image (`vrh_qwen25 ... image_position=after_prompt`), so image tokens can
    # read the expression; False: the backend's default order, image first.
    prompt_first: bool = False

    @property
    def pixels(self) -> int:
        """min_pixels = max_pixels = this, so qwen_vl_utils keeps the image at its native size."""
        return self.image_size * self.image_size

    def scene_config(self) -> SceneConfig:
        kw = dict(self.scene)
        for key in ("colours", "shapes", "background"):
            if key in kw:
                kw[key] = tuple(kw[key])
        return SceneConfig(image_size=self.image_size, **kw)

    def quantise(self, value: float) -> int:
        b = self.coord_bin
        return int(min(self.image_size, max(0, round(value / b) * b)))

    def answer_box(self, bbox_xywh) -> list[int]:
        """Target [x1, y1, x2, y2] in resized-image pixels (= original pixels: the image is never resized)."""
        x, y, w, h = bbox_xywh
        return [self.quantise(x), self.quantise(y), self.quantise(x + w), self.quantise(y + h)]

    def coord_values(self) -> list[int]:
        return list(range(0, self.image_size + 1, self.coord_bin))

    def model_args(self) -> dict[str, Any]:
        """`vrh_qwen25` model args that feed the model as it was trained (float32; image size; prompt first)."""
        args: dict[str, Any] = {"dtype": "float32", "min_pixels": self.pixels, "max_pixels": self.pixels}
        return {**args, "image_position": "after_prompt"} if self.prompt_first else args

    def scene_set(self, n: int, start: int) -> dict[str, Any]:
        """The synthetic-scene settings (VRH_SYNTH_CONFIG's keys) of `n` held-out scenes from scene id `start`."""
        return {"n": n, "seed": EVAL_SCENE_SEED, "start": start, "scene": {**self.scene, "image_size": self.image_size}}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DemoSpec":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def save(self, folder: str | Path) -> Path:
        path = Path(folder) / SPEC_FILE
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, folder: str | Path) -> "DemoSpec":
        return cls.from_dict(json.loads((Path(folder) / SPEC_FILE).read_text()))


def prompt_for(expression: str) -> str:
    return PROMPT.format(expression=expression)
