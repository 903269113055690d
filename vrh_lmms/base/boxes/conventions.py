"""The table of box conventions: how to ask each model family for a box, read its answer, and map it to pixels.

A convention bundles the prompt wording for a referring expression, the extractors that find coordinates in the
reply, and the coordinate space they are in. ``read_box`` never raises on model output: an unreadable reply is a
``BoxReading`` with ``box=None`` (a parse failure the tasks record).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vrh_lmms.base.boxes import extract as ex
from vrh_lmms.base.boxes.geometry import clip_box, order_corners
from vrh_lmms.base.boxes.resize import LMMS_EVAL_MAX_PIXELS, LMMS_EVAL_MIN_PIXELS
from vrh_lmms.base.boxes.spaces import SPACES

QWEN_BOX_PROMPT = "Locate {expression} in the image and output its bbox coordinates in JSON format."
QWEN_POINT_PROMPT = "Locate {expression} in the image and output its point coordinates in JSON format."
REC_PROMPT = "Please provide the bounding box coordinate of the region this sentence describes: {expression}."


@dataclass(frozen=True)
class BoxReading:
    """One reply read as a box. ``box`` is original-image pixels ``[x1, y1, x2, y2]``, or None (parse failure)."""

    box: list[float] | None
    raw: list[float] | None
    n_boxes: int

    @property
    def ok(self) -> bool:
        return self.box is not None


@dataclass(frozen=True)
class PointReading:
    """One reply read as points (original-image pixels, not clipped: points outside the image score 0)."""

    points: list[list[float]]
    raw: list[list[float]]
    from_boxes: bool = False

    @property
    def ok(self) -> bool:
        return bool(self.points)


@dataclass(frozen=True)
class Convention:
    name: str
    summary: str
    box_prompt: str
    space: str
    box_extractors: tuple[ex.Extractor, ...] = ex.GENERIC_BOX_EXTRACTORS
    # None: ask for a box and score its centre (the family has no documented point format)
    point_prompt: str | None = None
    point_extractors: tuple[ex.Extractor, ...] = (ex.json_points, ex.bracket_points)
    params: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""

    # ------------------------------------------------------------------ prompts
    def prompt(self, expression: str) -> str:
        """The request for a box around ``expression``."""
        return self.box_prompt.format(expression=expression)

    def pointing_prompt(self, expression: str) -> str:
        return (self.point_prompt or self.box_prompt).format(expression=expression)

    # ------------------------------------------------------------------ parameters
    def merged_params(self, params: Mapping[str, Any] | None = None, strict: bool = False) -> dict[str, Any]:
        """Defaults overlaid with ``params``; keys this convention does not use are dropped, or refused if strict."""
        params = dict(params or {})
        unknown = sorted(set(params) - set(self.params))
        if unknown and strict:
            known = ", ".join(sorted(self.params)) or "none"
            raise ValueError(f"box convention {self.name!r} has no parameter(s) {', '.join(unknown)}; known: {known}")
        return {**self.params, **{k: v for k, v in params.items() if k in self.params}}

    # ------------------------------------------------------------------ reading
    def to_pixels(self, raw: Sequence[float], image_size: Sequence[int], params: Mapping[str, Any] | None = None,
                  ) -> list[float]:
        """Map coordinates (x, y alternating) from this convention's space to original-image pixels."""
        width, height = float(image_size[0]), float(image_size[1])
        is_x = [i % 2 == 0 for i in range(len(raw))]
        return SPACES[self.space](list(raw), is_x, width, height, self.merged_params(params))

    def read_box(self, text: str | None, image_size: Sequence[int], **params: Any) -> BoxReading:
        """First box in the reply, in original pixels (corners ordered, clipped); ``n_boxes`` counts all found."""
        found = ex.first_boxes(ex.focus(text or ""), self.box_extractors)
        if not found:
            return BoxReading(None, None, 0)
        raw = found[0]
        px = order_corners(self.to_pixels(raw, image_size, params))
        return BoxReading(clip_box(px, image_size[0], image_size[1]), raw, len(found))

    def read_points(self, text: str | None, image_size: Sequence[int], **params: Any) -> PointReading:
        """Every point in the reply; a reply with boxes only gives their centres."""
        body = ex.focus(text or "")
        raw_points = [] if self.point_prompt is None else ex.first_boxes(body, self.point_extractors)
        if raw_points:
            return PointReading([self.to_pixels(p, image_size, params) for p in raw_points], raw_points)
        boxes = ex.first_boxes(body, self.box_extractors)
        centres = [[(b[0] + b[2]) / 2, (b[1] + b[3]) / 2] for b in boxes]
        return PointReading([self.to_pixels(c, image_size, params) for c in centres], centres, from_boxes=True)


_QWEN25_PARAMS = {"min_pixels": LMMS_EVAL_MIN_PIXELS, "max_pixels": LMMS_EVAL_MAX_PIXELS, "fetch_min_pixels": None,
                  "fetch_max_pixels": None, "factor": 28, "fetch": True}

# The conventions, one constant each. A family's record (vrh_lmms.base.families) owns the one it speaks; CONVENTIONS
# below is derived from the registry (plus GENERIC, the fallback), so no convention table is kept by hand.
QWEN2_5_VL = Convention(
    "qwen2_5_vl", "JSON bbox_2d in absolute pixels of the smart_resize'd image", QWEN_BOX_PROMPT,
    "resized_pixels", point_prompt=QWEN_POINT_PROMPT, params=_QWEN25_PARAMS,
    source="Qwen2.5-VL report/cookbook (absolute coordinates); resize = qwen_vl_utils then the HF processor, "
           "as lmms-eval's qwen2_5_vl backend does")

QWEN3_VL = Convention(
    "qwen3_vl", "JSON bbox_2d on a 0-1000 grid", QWEN_BOX_PROMPT, "norm1000", point_prompt=QWEN_POINT_PROMPT,
    source="Qwen3-VL cookbook: relative coordinates 0-1000")

GLM4V = Convention(
    "glm4v", "<|begin_of_box|>[x1,y1,x2,y2]<|end_of_box|> on a 0-1000 grid",
    "Locate {expression} in the image and give its bounding box as [x1, y1, x2, y2].", "norm1000",
    source="GLM-4.1V/4.5V (zai-org/GLM-V): box tokens, coordinates normalised to 1000")

INTERNVL = Convention(
    "internvl", "<ref>..</ref><box>[[x1,y1,x2,y2]]</box> on a 0-1000 grid",
    "Please provide the bounding box coordinate of the region this sentence describes: "
    "<ref>{expression}</ref>", "norm1000",
    box_extractors=(ex.in_tags("<box>", "</box>"), *ex.GENERIC_BOX_EXTRACTORS),
    source="InternVL evaluate_grounding (OpenGVLab/InternVL): <box>[[...]]</box>, divide by 1000")

LLAVA_NEXT = Convention(
    "llava_next", "[x1, y1, x2, y2] as fractions of the image", REC_PROMPT, "unit",
    params={"pad_to_square": False},
    source="LLaVA-1.5 REC data (fractions, 2-3 decimals); LLaVA-1.5 reads them on the padded square "
           "(pad_to_square=True), LLaVA-NeXT's anyres does not pad (default False)")

LLAVA = Convention(
    "llava", "[x1, y1, x2, y2] as fractions of the image padded to a centred square", REC_PROMPT, "unit",
    params={"pad_to_square": True},
    source="LLaVA-1.5 REC training data (llava_v1_5_mix665k: fractions, 2-3 decimals, of the image padded to a "
           "square, image_aspect_ratio=pad)")

PALIGEMMA = Convention(
    "paligemma", "'detect <expr>' -> <locY1><locX1><locY2><locX2> label, bins 0-1023, y first",
    "detect {expression}", "loc1023", box_extractors=(ex.loc_boxes,),
    source="PaliGemma / big_vision: 4 <locNNNN> tokens per box, ymin xmin ymax xmax; decoded as "
           "value/1023*size like big_vision's evaluators/proj/paligemma/transfers/segmentation.py")

DEEPSEEK_VL2 = Convention(
    "deepseek_vl2", "<|ref|>..<|/ref|><|det|>[[x1,y1,x2,y2]]<|/det|> on a 0-999 grid",
    "<|ref|>{expression}<|/ref|>.", "norm999",
    box_extractors=(ex.in_tags("<|det|>", "<|/det|>"), *ex.GENERIC_BOX_EXTRACTORS),
    source="DeepSeek-VL2 README grounding example: coordinates normalised to 999")

PHI4_MULTIMODAL = Convention(
    "phi4_multimodal", "no documented box format; asked for fractions, values > 1 read on a 0-1000 grid",
    "Output the bounding box of {expression} in the image as [x1, y1, x2, y2], with coordinates "
    "normalized between 0 and 1.", "auto",
    point_prompt="Point to {expression} in the image. Output [x, y], with coordinates normalized between 0 "
                 "and 1.",
    source="Phi-4-multimodal model card / technical report list no grounding format; this choice is ours")

MAGMA = Convention(
    "magma", "fractions of the image, 2 decimals (values > 1: Qwen-VL-style 0-1000 <box>)",
    REC_PROMPT, "auto",
    box_extractors=(ex.in_tags("<box>", "</box>"), *ex.GENERIC_BOX_EXTRACTORS),
    point_prompt="Point to {expression} in the image. Output (x, y), with coordinates normalized between 0 "
                 "and 1.",
    source="microsoft/Magma agents/ui_agent: bbox_2_bbox / pred_2_point use 0-1 floats with 2 decimals; "
           "extract_bbox reads Qwen-VL <box>(x1,y1),(x2,y2)</box> on 0-1000")

GENERIC = Convention(
    "generic", "[x1, y1, x2, y2] on a 0-1000 grid (fractions accepted)",
    "Locate {expression} in the image. Output its bounding box as [x1, y1, x2, y2] with coordinates "
    "normalized to 0-1000.", "auto",
    point_prompt="Point to {expression} in the image. Output [x, y] with coordinates normalized to 0-1000.",
    source="vrh-lmms fallback for models without a known convention")
