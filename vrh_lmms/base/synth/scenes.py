"""Seeded synthetic grounding scenes: coloured shapes and referring expressions, in the RefCOCO schema.

A scene holds a few shapes; one is the referent, named by colour and shape ("the red circle"). Distractors share the
referent's colour or its shape, so finding it needs a conjunctive lookup rather than one feature. Boxes are COCO
``[x, y, w, h]`` pixels, as in RefCOCO. Everything is a pure function of the seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from PIL import Image, ImageDraw

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (235, 215, 40),
    "purple": (150, 60, 190),
    "orange": (245, 140, 30),
    "white": (245, 245, 245),
    "cyan": (40, 210, 220),
}
SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "diamond", "cross", "ring")


@dataclass(frozen=True)
class SceneConfig:
    """How scenes look. Defaults suit tests; the demo model uses its own (see vrh_lmms.pipelines.demo)."""

    image_size: int = 224
    min_objects: int = 3
    max_objects: int = 5
    min_size: int = 28
    max_size: int = 64
    colours: tuple[str, ...] = tuple(COLOURS)
    shapes: tuple[str, ...] = SHAPES
    background: tuple[int, int, int] = (90, 90, 90)
    # Share of distractors that repeat the referent's colour or shape (the rest are random).
    conjunctive_share: float = 0.8
    # Amplitude (0-255) of a smooth colour ramp that encodes (x, y) in every pixel; 0 disables it.
    position_tint: int = 0
    # Compress every base colour (background included) into [tint/2, 255 - tint/2] first, so the ramp never clips
    # and the (x, y) code stays exact for every colour.
    tint_headroom: bool = False
    max_overlap_iou: float = 0.0
    # > 0: objects fill whole cells of a grid of this pitch (pixels), one object per cell, sizes ignored. With the
    # pitch of a model's image tokens (28 px for Qwen2.5-VL) every object is exactly one token.
    grid_cell: int = 0


@dataclass(frozen=True)
class SceneObject:
    shape: str
    colour: str
    bbox: tuple[float, float, float, float]  # x, y, w, h (pixels)


@dataclass
class Scene:
    scene_id: int
    image: Image.Image
    objects: list[SceneObject]
    target: int
    expression: str
    extra: dict = field(default_factory=dict)

    @property
    def target_object(self) -> SceneObject:
        return self.objects[self.target]


def _iou_xywh(a, b) -> float:
    ax2, ay2, bx2, by2 = a[0] + a[2], a[1] + a[3], b[0] + b[2], b[1] + b[3]
    iw = max(0.0, min(ax2, bx2) - max(a[0], b[0]))
    ih = max(0.0, min(ay2, by2) - max(a[1], b[1]))
    inter = iw * ih
    union = a[2] * a[3] + b[2] * b[3] - inter
    return inter / union if union > 0 else 0.0


def _pick_attributes(rng: np.random.Generator, cfg: SceneConfig, n: int) -> list[tuple[str, str]]:
    """Referent first; every other object differs from it in at least one attribute (so it is unique)."""
    colour = str(rng.choice(cfg.colours))
    shape = str(rng.choice(cfg.shapes))
    attrs = [(shape, colour)]
    for _ in range(n - 1):
        while True:
            if rng.random() < cfg.conjunctive_share:
                if rng.random() < 0.5:
                    cand = (shape, str(rng.choice([c for c in cfg.colours if c != colour])))
                else:
                    cand = (str(rng.choice([s for s in cfg.shapes if s != shape])), colour)
            else:
                cand = (str(rng.choice(cfg.shapes)), str(rng.choice(cfg.colours)))
            if cand != (shape, colour):
                attrs.append(cand)
                break
    return attrs


def _place_on_grid(rng: np.random.Generator, cfg: SceneConfig, n: int) -> list[tuple[float, float, float, float]]:
    side = cfg.image_size // cfg.grid_cell
    if n > side * side:
        raise ValueError(f"{n} objects do not fit a {side} x {side} grid; lower max_objects or grid_cell")
    cells = rng.choice(side * side, size=n, replace=False)
    c = float(cfg.grid_cell)
    return [(float(i % side) * c, float(i // side) * c, c, c) for i in cells]


def _place(rng: np.random.Generator, cfg: SceneConfig, n: int) -> list[tuple[float, float, float, float]]:
    if cfg.grid_cell > 0:
        return _place_on_grid(rng, cfg, n)
    boxes: list[tuple[float, float, float, float]] = []
    tries = 0
    while len(boxes) < n:
        tries += 1
        if tries > 2000:
            raise RuntimeError("could not place objects without overlap; lower max_objects or max_size")
        size = int(rng.integers(cfg.min_size, cfg.max_size + 1))
        x = int(rng.integers(0, cfg.image_size - size + 1))
        y = int(rng.integers(0, cfg.image_size - size + 1))
        box = (float(x), float(y), float(size), float(size))
        if all(_iou_xywh(box, b) <= cfg.max_overlap_iou for b in boxes):
            boxes.append(box)
    return boxes


def _base(colour: tuple[int, ...], cfg: SceneConfig) -> tuple[float, ...]:
    if not (cfg.tint_headroom and cfg.position_tint > 0):
        return tuple(colour)
    half = cfg.position_tint / 2
    return tuple(half + c * (255 - cfg.position_tint) / 255 for c in colour)


def _tint(colour: tuple[int, int, int], x: float, y: float, cfg: SceneConfig) -> tuple[int, int, int]:
    if cfg.position_tint <= 0:
        return colour
    fx, fy = x / cfg.image_size - 0.5, y / cfg.image_size - 0.5
    r, g, b = _base(colour, cfg)
    return (int(np.clip(r + cfg.position_tint * fx, 0, 255)), int(np.clip(g + cfg.position_tint * fy, 0, 255)),
            int(np.clip(b - cfg.position_tint * (fx + fy) / 2, 0, 255)))


def _background(cfg: SceneConfig) -> Image.Image:
    s = cfg.image_size
    base = np.empty((s, s, 3), dtype=np.float32)
    base[:] = _base(cfg.background, cfg)
    if cfg.position_tint > 0:
        ramp = (np.arange(s, dtype=np.float32) / s - 0.5) * cfg.position_tint
        base[:, :, 0] += ramp[None, :]
        base[:, :, 1] += ramp[:, None]
        base[:, :, 2] -= (ramp[None, :] + ramp[:, None]) / 2
    return Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))


def _draw(draw: ImageDraw.ImageDraw, obj: SceneObject, cfg: SceneConfig) -> None:
    x, y, w, h = obj.bbox
    x2, y2 = x + w - 1, y + h - 1
    cx, cy = x + w / 2, y + h / 2
    fill = _tint(COLOURS[obj.colour], cx, cy, cfg)
    if obj.shape == "circle":
        draw.ellipse([x, y, x2, y2], fill=fill)
    elif obj.shape == "square":
        draw.rectangle([x, y, x2, y2], fill=fill)
    elif obj.shape == "triangle":
        draw.polygon([(cx, y), (x2, y2), (x, y2)], fill=fill)
    elif obj.shape == "diamond":
        draw.polygon([(cx, y), (x2, cy), (cx, y2), (x, cy)], fill=fill)
    elif obj.shape == "cross":
        t = max(2.0, w / 3)
        draw.rectangle([cx - t / 2, y, cx + t / 2, y2], fill=fill)
        draw.rectangle([x, cy - t / 2, x2, cy + t / 2], fill=fill)
    elif obj.shape == "ring":
        draw.ellipse([x, y, x2, y2], fill=fill)
        inset = max(2.0, w / 4)
        bg = _tint(cfg.background, cx, cy, cfg)
        draw.ellipse([x + inset, y + inset, x2 - inset, y2 - inset], fill=bg)
    else:
        raise ValueError(f"unknown shape {obj.shape!r}; known: {', '.join(SHAPES)}")


def generate_scene(scene_id: int, seed: int = 0, cfg: SceneConfig | None = None) -> Scene:
    """Scene `scene_id` of the stream with this seed: independent of how many other scenes are made."""
    cfg = cfg or SceneConfig()
    rng = np.random.default_rng([seed, scene_id])
    n = int(rng.integers(cfg.min_objects, cfg.max_objects + 1))
    attrs = _pick_attributes(rng, cfg, n)
    boxes = _place(rng, cfg, n)
    objects = [SceneObject(shape=s, colour=c, bbox=b) for (s, c), b in zip(attrs, boxes)]
    order = rng.permutation(n)  # draw order and list order carry no hint of the referent
    objects = [objects[i] for i in order]
    target = int(np.where(order == 0)[0][0])
    image = _background(cfg)
    draw = ImageDraw.Draw(image)
    for obj in objects:
        _draw(draw, obj, cfg)
    return Scene(scene_id=scene_id, image=image, objects=objects, target=target,
                 expression=expression_for(objects[target]))


def expression_for(obj: SceneObject) -> str:
    return f"the {obj.colour} {obj.shape}"


def nameable_objects(scene: Scene) -> list[int]:
    """Indices of the objects an expression names uniquely (no other object of the same colour and shape), the
    referent first: the referents of a RefCOCO-style image with several annotated objects."""
    counts: dict[tuple[str, str], int] = {}
    for obj in scene.objects:
        counts[(obj.colour, obj.shape)] = counts.get((obj.colour, obj.shape), 0) + 1
    others = [i for i, o in enumerate(scene.objects) if i != scene.target and counts[(o.colour, o.shape)] == 1]
    return [scene.target, *others]


def generate_scenes(n: int, seed: int = 0, cfg: SceneConfig | None = None, start: int = 0) -> list[Scene]:
    return [generate_scene(start + i, seed, cfg) for i in range(n)]


def polygon_of(bbox: tuple[float, float, float, float]) -> list[float]:
    """Box outline as a flat COCO polygon (RefCOCO rows carry a segmentation)."""
    x, y, w, h = bbox
    return [x, y, x + w, y, x + w, y + h, x, y + h]


def box_area(bbox) -> float:
    return float(bbox[2] * bbox[3])


def grid_cells(image_size: int, cell: int) -> int:
    return math.ceil(image_size / cell)
